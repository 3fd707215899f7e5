"""Routing: upstream tables → target tables, with column filters. The one router of rowbus:
the Spark apply job, shard-DDL groups and `rowbus verify` all use it.

A rule's `match` is ``[source/]schema.table`` with fnmatch wildcards in each part (no source part:
any source). Rules are tried in order; the first that fits wins. Several upstream tables may share
a target (shard merge); their primary keys must not collide. A `Projection` is computed once per
(source, table schema) and maps an upstream image to the target's columns.
"""

from __future__ import annotations

import fnmatch
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from pydantic import Field

from rowbus.clients.mysql import quote
from rowbus.clients.settings import StrictModel
from rowbus.protocol.events import TableSchema
from rowbus.protocol.values import Value
from rowbus.routing.exceptions import RoutingError


class RouteSettings(StrictModel):
    """Upstream tables matching `match` (``[source/]schema.table``, fnmatch wildcards in each part;
    no source part: every source) go to `target` (a ``schema.table`` template with ``{source}``,
    ``{schema}`` and ``{table}``); columns are filtered by `include` (empty: all), then `exclude`,
    then renamed by `rename` (upstream → target name)."""

    match: str = Field(pattern=r"^(?:[^/.]+/)?[^./]+\.[^./]+$")
    """Upstream tables, ``[source/]schema.table`` with fnmatch wildcards in each part."""
    target: str = Field("{schema}.{table}", pattern=r"^[^.]+\.[^.]+$")
    """The sink table, a ``schema.table`` template with ``{source}``, ``{schema}``, ``{table}``."""
    include: tuple[str, ...] = ()
    """Columns to keep (empty: all)."""
    exclude: tuple[str, ...] = ()
    """Columns to leave out (after `include`)."""
    rename: dict[str, str] = Field(default_factory=dict)
    """Upstream column name → its name in the sink."""
    sharded: bool = False
    """Several upstream tables feed the target: their DDL is coordinated (shard DDL)."""

    def matches(self, source: str | None, schema: str, table: str) -> bool:
        """Whether the rule fits; a rule naming a source never fits an unknown source."""
        where, _, name = self.match.rpartition("/")
        if where and (source is None or not fnmatch.fnmatchcase(source, where)):
            return False
        return fnmatch.fnmatchcase(f"{schema}.{table}", name)


_IDENTITY = RouteSettings(match="*.*")


@dataclass(frozen=True, slots=True)
class Target:
    """A downstream table."""

    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def quoted(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"


@dataclass(frozen=True, slots=True)
class Projection:
    """How one upstream table schema maps onto its target."""

    target: Target
    columns: tuple[str, ...]
    """Target column names, in projected order."""
    indexes: tuple[int, ...]
    """For each target column, its position in the upstream image."""
    key_positions: tuple[int, ...]
    """Positions of the key columns in the projected values."""
    sharded: bool
    keyless: bool = False
    """The upstream table has no primary key: every column identifies a row (`key_positions`
    names them all), and its rows are applied in order, not collapsed."""

    _values: Callable[[Sequence[Value]], tuple[Value, ...]] = field(
        init=False, repr=False, compare=False
    )
    _key: Callable[[Sequence[Value]], tuple[Value, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # Called once per row event: getters built once per table schema.
        object.__setattr__(self, "_values", _getter(self.indexes))
        object.__setattr__(self, "_key", _getter([self.indexes[p] for p in self.key_positions]))

    def values(self, image: Sequence[Value]) -> tuple[Value, ...]:
        return self._values(image)

    def key(self, image: Sequence[Value]) -> tuple[Value, ...]:
        return self._key(image)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(self.columns[p] for p in self.key_positions)


def _getter(indexes: Sequence[int]) -> Callable[[Sequence[Value]], tuple[Value, ...]]:
    """A function picking `indexes` out of an image, as a tuple."""
    if len(indexes) == 1:
        (i,) = indexes
        return lambda image: (image[i],)
    return cast("Callable[[Sequence[Value]], tuple[Value, ...]]", operator.itemgetter(*indexes))


class Router:
    """Applies routing rules; caches per table and per schema id."""

    def __init__(self, routes: Sequence[RouteSettings], unrouted: str = "identity") -> None:
        self._routes = tuple(routes)
        self._unrouted = unrouted
        self._rules: dict[tuple[str | None, str, str], RouteSettings | None] = {}
        self._projections: dict[tuple[str | None, int], Projection | None] = {}

    @property
    def routes(self) -> tuple[RouteSettings, ...]:
        return self._routes

    def rule(self, schema: str, table: str, source: str | None = None) -> RouteSettings | None:
        """The rule for `schema.table` of `source`; None if its events are skipped."""
        key = (source, schema, table)
        if key not in self._rules:
            self._rules[key] = self._find(source, schema, table)
        return self._rules[key]

    def _find(self, source: str | None, schema: str, table: str) -> RouteSettings | None:
        for route in self._routes:
            if route.matches(source, schema, table):
                return route
        if self._unrouted == "identity":
            return _IDENTITY
        if self._unrouted == "skip":
            return None
        where = f"{source}/" if source else ""
        raise RoutingError(f"no route matches {where}{schema}.{table} (unrouted: error)")

    def target(self, schema: str, table: str, source: str | None = None) -> Target | None:
        """The target of `schema.table` of `source`, or None if skipped."""
        rule = self.rule(schema, table, source)
        if rule is None:
            return None
        target_schema, _, target_table = rule.target.partition(".")
        names = {"schema": schema, "table": table, "source": source or ""}
        try:
            return Target(target_schema.format(**names), target_table.format(**names))
        except (KeyError, IndexError, ValueError) as exc:
            raise RoutingError(f"bad target template {rule.target!r}: {exc}") from None

    def sharded(self, schema: str, table: str, source: str | None = None) -> bool:
        rule = self.rule(schema, table, source)
        return rule is not None and rule.sharded

    def shard_target(self, source: str, schema: str, table: str) -> str | None:
        """The target ``schema.table`` when `source/schema.table` is routed by a sharded rule
        (what shard-DDL groups are built from), else None."""
        if not self.sharded(schema, table, source):
            return None
        target = self.target(schema, table, source)
        return None if target is None else str(target)

    def projection(self, table: TableSchema, source: str | None = None) -> Projection | None:
        """The projection of `table` (of `source`) onto its target; None if skipped."""
        key = (source, table.schema_id)
        if key not in self._projections:
            self._projections[key] = self._project(table, source)
        return self._projections[key]

    def _project(self, table: TableSchema, source: str | None) -> Projection | None:
        rule = self.rule(table.schema, table.table, source)
        target = self.target(table.schema, table.table, source)
        if rule is None or target is None:
            return None
        names = table.column_names
        unknown = (set(rule.include) | set(rule.exclude) | set(rule.rename)) - set(names)
        if unknown:
            raise RoutingError(
                f"route {rule.match!r} names columns {sorted(unknown)} that "
                f"{table.qualified} does not have"
            )
        kept = [n for n in names if (not rule.include or n in rule.include)]
        kept = [n for n in kept if n not in rule.exclude]
        dropped_keys = [k for k in table.primary_key if k not in kept]
        if dropped_keys:
            raise RoutingError(
                f"route {rule.match!r} filters out key columns {dropped_keys} of {table.qualified}"
            )
        columns = tuple(rule.rename.get(n, n) for n in kept)
        if len(set(columns)) != len(columns):
            raise RoutingError(
                f"route {rule.match!r} renames two columns of {table.qualified} to one name"
            )
        keyless = not table.primary_key
        return Projection(
            target=target,
            columns=columns,
            indexes=tuple(names.index(n) for n in kept),
            key_positions=tuple(
                range(len(kept)) if keyless else (kept.index(k) for k in table.primary_key)
            ),
            sharded=rule.sharded,
            keyless=keyless,
        )
