"""Rows of a step collapsed to the last image per target key, then rendered as SQL.

`collapse` turns the released row events of a step into, per target table, the final state of
each key: an image to upsert, or a deletion. An update that changes the primary key deletes the
old key and upserts the new one. Deletions run before upserts, so a key that moves onto one just
freed lands. Both statements are idempotent (DM's safe mode): replaying them changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from rowbus.protocol.events import Op, RowChange, TableSchema
from rowbus.protocol.values import Value
from rowbus.spark_apply.exceptions import BadEventError, RoutingError
from rowbus.spark_apply.literals import chunks, literal, row_literal
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.routing import Projection, Router, Target, quote

SchemaLookup = Callable[[int], TableSchema | None]
STATEMENT_BYTES = 4 << 20
"""Upper bound of one rendered statement (MariaDB's default max_allowed_packet is 16 MiB)."""


@dataclass(slots=True)
class TableChanges:
    """The final state of each touched key of one target table."""

    target: Target
    key_columns: tuple[str, ...]
    upserts: dict[tuple[Value, ...], tuple[tuple[str, ...], tuple[Value, ...], Envelope]] = field(
        default_factory=dict
    )
    deletes: dict[tuple[Value, ...], tuple[tuple[str, ...], Envelope]] = field(default_factory=dict)

    def upsert(
        self,
        key: tuple[Value, ...],
        columns: tuple[str, ...],
        values: tuple[Value, ...],
        env: Envelope,
    ) -> None:
        self.deletes.pop(key, None)
        self.upserts[key] = (columns, values, env)

    def delete(self, key: tuple[Value, ...], key_columns: tuple[str, ...], env: Envelope) -> None:
        self.upserts.pop(key, None)
        self.deletes[key] = (key_columns, env)

    def __len__(self) -> int:
        return len(self.upserts) + len(self.deletes)


def project(env: Envelope, router: Router, schemas: SchemaLookup) -> Projection | None:
    """The projection of a row event's table, or BadEventError naming the event."""
    ev = env.event
    assert isinstance(ev, RowChange)
    table = schemas(ev.schema_id)
    if table is None:
        raise BadEventError(
            f"unknown schema id {ev.schema_id} of {ev.schema}.{ev.table} "
            "(not in the schemas topic)",
            env.position,
        )
    try:
        proj = router.projection(table)
    except RoutingError as exc:
        raise BadEventError(f"bad routing: {exc}", env.position) from exc
    if proj is not None:
        for image in (ev.before, ev.after):
            if image is not None and len(image) != len(table.columns):
                raise BadEventError(
                    f"image has {len(image)} values, schema {ev.schema_id} of "
                    f"{table.qualified} has {len(table.columns)} columns",
                    env.position,
                )
    return proj


def collapse(
    rows: Iterable[Envelope],
    router: Router,
    schemas: SchemaLookup,
    shard_of: Callable[[Target, tuple[Value, ...]], int] = lambda t, k: 0,
) -> dict[int, dict[Target, TableChanges]]:
    """Per shard, per target: the last image of each key (or its deletion)."""
    out: dict[int, dict[Target, TableChanges]] = {}

    def changes(proj: Projection, key: tuple[Value, ...]) -> TableChanges:
        per_shard = out.setdefault(shard_of(proj.target, key), {})
        tc = per_shard.get(proj.target)
        if tc is None:
            tc = per_shard[proj.target] = TableChanges(proj.target, proj.key_columns)
        return tc

    for env in rows:
        ev = env.event
        assert isinstance(ev, RowChange)
        proj = project(env, router, schemas)
        if proj is None:
            continue
        if ev.op is Op.DELETE:
            assert ev.before is not None
            key = proj.key(ev.before)
            changes(proj, key).delete(key, proj.key_columns, env)
            continue
        assert ev.after is not None
        key = proj.key(ev.after)
        if ev.op is Op.UPDATE and ev.before is not None:
            old = proj.key(ev.before)
            if old != key:
                changes(proj, old).delete(old, proj.key_columns, env)
        changes(proj, key).upsert(key, proj.columns, proj.values(ev.after), env)
    return out


def upsert_statements(
    target: Target,
    columns: Sequence[str],
    key_columns: Sequence[str],
    rows: Iterable[Sequence[Value]],
    max_bytes: int = STATEMENT_BYTES,
) -> Iterator[str]:
    """Multi-row ``INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE`` statements (pre-escaped)."""
    cols = ", ".join(quote(c) for c in columns)
    rest = [c for c in columns if c not in key_columns] or list(key_columns[:1])
    update = ", ".join(f"{quote(c)} = VALUES({quote(c)})" for c in rest)
    head = f"INSERT INTO {target.quoted} ({cols}) VALUES "
    tail = f" ON DUPLICATE KEY UPDATE {update}"
    return chunks(head, tail, map(row_literal, rows), max_bytes)


def delete_statements(
    target: Target,
    key_columns: Sequence[str],
    keys: Iterable[Sequence[Value]],
    max_bytes: int = STATEMENT_BYTES,
) -> Iterator[str]:
    """``DELETE … WHERE key IN (…)`` statements (pre-escaped)."""
    if len(key_columns) == 1:
        head = f"DELETE FROM {target.quoted} WHERE {quote(key_columns[0])} IN ("
        items: Iterable[str] = (literal(k[0]) for k in keys)
    else:
        cols = "(" + ", ".join(quote(c) for c in key_columns) + ")"
        head = f"DELETE FROM {target.quoted} WHERE {cols} IN ("
        items = map(row_literal, keys)
    return chunks(head, ")", items, max_bytes)
