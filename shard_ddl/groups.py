"""Shard groups: every upstream table that routing sends to one target table.

A shard is named ``source/schema.table``; a target ``schema.table``. Routing is given as a
function ``(source, schema, table) -> target or None`` (None: not a shard) —
`rowbus.routing.routes.Router.shard_target`, the one router. A target is sharded when it has
more than one shard, or when it is named in `sharded` (a group of one shard today that may
grow).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

RouteFn = Callable[[str, str, str], str | None]


def shard_name(source: str, schema: str, table: str) -> str:
    return f"{source}/{schema}.{table}"


@dataclass(frozen=True)
class ShardGroups:
    """Target → its shards, for the upstream tables known."""

    groups: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    targets: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Shard → target."""

    @staticmethod
    def build(
        route: RouteFn,
        tables: Iterable[tuple[str, str, str]],
        sharded: Iterable[str] = (),
    ) -> ShardGroups:
        """Groups of the upstream `tables` (``(source, schema, table)``) under `route`."""
        by_target: dict[str, set[str]] = defaultdict(set)
        for source, schema, table in tables:
            target = route(source, schema, table)
            if target is not None:
                by_target[target].add(shard_name(source, schema, table))
        keep = set(sharded)
        groups = {t: frozenset(s) for t, s in by_target.items() if len(s) > 1 or t in keep}
        targets = {s: t for t, shards in groups.items() for s in shards}
        return ShardGroups(MappingProxyType(groups), MappingProxyType(targets))

    def target_of(self, source: str, schema: str, table: str) -> str | None:
        """The sharded target `schema.table` of `source` feeds, or None if it is not a shard."""
        return self.targets.get(shard_name(source, schema, table))

    def group(self, target: str) -> frozenset[str]:
        return self.groups.get(target, frozenset())
