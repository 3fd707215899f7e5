"""Rows of a step collapsed to the last image per target key, then rendered as SQL.

Collapse works on rendered images (`literals.LitImage`: each value as its SQL literal, as the
executors render them, `rendered`; a decoded image is rendered here): keys, rows and keyless
images in `TableChanges` are literal text (keys compare by it, which for the values of one
column is the values' equality; NULL is ``NULL``), and statements join them
(``rendered=True``).

`collapse` turns the released row events of a step into, per target table, the final state of
each key: an image to upsert, or a deletion. An update that changes the primary key deletes the
old key and upserts the new one. Deletions run before upserts, so a key that moves onto one just
freed lands. Both statements are idempotent (DM's safe mode): replaying them changes nothing.
Rows that share a value of another unique key of the target are deleted first, then inserted
(`rowbus.spark_apply.causality`). Keys are compared exactly, but the sink compares them by its
collation ('c' = 'C' = 'c ' under ``utf8mb4_general_ci``): keys with one skeleton
(`rowbus.spark_apply.keys.sink_key`) are one row there, so they are written by one shard, and
when a step touches several of them their upserts are cleared first like a conflict group (the
deletions of the others run first anyway; clearing also holds when the source's collation is
finer than the sink's). A table without a primary key is not collapsed: its changes
are applied one by one, each on one row matching every column (PROTOCOL.md "Tables without a
primary key"); those statements are not idempotent, which the sink's checkpoint in the same
transaction makes safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from rowbus.clients.mysql import quote
from rowbus.protocol.events import Op, RowChange, TableSchema
from rowbus.protocol.values import Value
from rowbus.routing.exceptions import RoutingError
from rowbus.routing.routes import Projection, Router, Target
from rowbus.spark_apply.causality import conflict_groups, owners
from rowbus.spark_apply.exceptions import BadEventError
from rowbus.spark_apply.keys import Fold, sink_key
from rowbus.spark_apply.literals import (
    as_literals,
    chunks,
    literal,
    row_literal,
    row_of_literals,
)
from rowbus.spark_apply.planner import Envelope

SchemaLookup = Callable[[int], TableSchema | None]
STATEMENT_BYTES = 4 << 20
"""Upper bound of one rendered statement (MariaDB's default max_allowed_packet is 16 MiB)."""


@dataclass(slots=True)
class TableChanges:
    """The final state of each touched key of one target table.

    `clear`: keys whose old row is deleted before their upsert (they share a unique key value
    with another touched row, `rowbus.spark_apply.causality`). `ordered`: the row changes of a
    table without a primary key, applied one by one in binlog order (PROTOCOL.md "Tables
    without a primary key").
    """

    target: Target
    key_columns: tuple[str, ...]
    upserts: dict[tuple[Value, ...], tuple[tuple[str, ...], tuple[Value, ...], Envelope]] = field(
        default_factory=dict
    )
    deletes: dict[tuple[Value, ...], tuple[tuple[str, ...], Envelope]] = field(default_factory=dict)
    clear: dict[tuple[Value, ...], tuple[tuple[str, ...], Envelope]] = field(default_factory=dict)
    ordered: list[KeylessChange] = field(default_factory=list)

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
        return len(self.upserts) + len(self.deletes) + len(self.ordered)

    def subset(self, keys: Iterable[tuple[Value, ...]], keyless: bool) -> TableChanges:
        """The changes of `keys` only (and the keyless ones when `keyless`)."""
        part = TableChanges(self.target, self.key_columns)
        for key in keys:
            if key in self.upserts:
                part.upserts[key] = self.upserts[key]
            if key in self.deletes:
                part.deletes[key] = self.deletes[key]
            if key in self.clear:
                part.clear[key] = self.clear[key]
        if keyless:
            part.ordered = self.ordered
        return part


@dataclass(frozen=True, slots=True)
class KeylessChange:
    """One row change of a table without a primary key: `before` identifies the row (every
    column, NULL-safe, one row of several equal ones), `after` is its new image."""

    op: Op
    columns: tuple[str, ...]
    before: tuple[Value, ...] | None
    after: tuple[Value, ...] | None
    env: Envelope


def project(env: Envelope, router: Router, schemas: SchemaLookup) -> Projection | None:
    """The projection of a row event's table, or BadEventError naming the event."""
    ev = env.event
    assert isinstance(ev, RowChange)
    table = schemas(ev.schema_id)
    if table is None:
        raise BadEventError(
            f"unknown schema id {ev.schema_id} of {ev.schema}.{ev.table}: the schemas topic "
            "does not hold it; apply.schemas_topic must name the topic the readers of its source "
            "write (reader.schemas_topic)",
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


def collapse(  # noqa: PLR0915 - one pass per row, inlined: it runs for every applied row
    rows: Iterable[Envelope],
    router: Router,
    schemas: SchemaLookup,
    shard_of: Callable[[Target, tuple[Value, ...]], int] = lambda t, k: 0,
    unique_keys: Callable[[Target], Sequence[Sequence[str]]] = lambda t: (),
    generated: Callable[[Target], frozenset[str]] = lambda t: frozenset(),
    folds: Callable[[Target], Mapping[str, Fold]] = lambda t: {},
) -> dict[int, dict[Target, TableChanges]]:
    """Per shard, per target: the last image of each key (or its deletion); keys that share
    a value of one of the target's `unique_keys` are cleared first and sharded together
    (`rowbus.spark_apply.causality`); keyless rows stay in order, all in one shard. The
    target's `generated` columns (lower case) are left out of what is written: the sink
    computes them, and refuses a value for one. `folds`: how the sink compares the target's
    columns (lower case → `keys.Fold`; a column not there as text, which is coarse, so safe);
    `shard_of` gets a key's skeleton under them, not the key."""
    tables: dict[Target, TableChanges] = {}
    without_generated = _Writable(generated)

    images: dict[Target, dict[tuple[Value, ...], list[tuple[tuple[str, ...], tuple[Value, ...]]]]]
    images = {}

    def changes(proj: Projection) -> TableChanges:
        tc = tables.get(proj.target)
        if tc is None:
            tc = tables[proj.target] = TableChanges(proj.target, proj.key_columns)
        return tc

    uniques: dict[Target, tuple[Sequence[str], ...]] = {}

    def other_keys(proj: Projection) -> tuple[Sequence[str], ...]:
        # The target's unique keys besides the one rows are collapsed by (usually none: then
        # nothing below costs anything).
        found = uniques.get(proj.target)
        if found is None:
            mine = {c.lower() for c in proj.key_columns}
            found = uniques[proj.target] = tuple(
                k for k in unique_keys(proj.target) if {c.lower() for c in k} != mine
            )
        return found

    def seen(proj: Projection, key: tuple[Value, ...], image: Sequence[Value]) -> None:
        if other_keys(proj):
            per = images.setdefault(proj.target, {})
            per.setdefault(key, []).append((proj.columns, proj.values(image)))

    # Per schema id, what every row of it shares (its projection without the generated
    # columns, its table's changes, whether other unique keys are tracked, its column count),
    # looked up once: per row only the image lengths are checked again.
    shared: dict[int, tuple[Projection, TableChanges, bool, int] | None] = {}
    for env in rows:
        ev = env.event
        assert isinstance(ev, RowChange)
        try:
            entry = shared[ev.schema_id]
        except KeyError:
            entry = shared[ev.schema_id] = _shared(
                env, router, schemas, without_generated, changes, other_keys
            )
        if entry is None:
            continue
        proj, tc, tracked, width = entry
        # One form for every row of a step, whether the executors rendered it or it was
        # decoded (a stashed one read back): keys of both must compare equal.
        ev_before = as_literals(ev.before) if ev.before is not None else None
        ev_after = as_literals(ev.after) if ev.after is not None else None
        if (ev_before is not None and len(ev_before) != width) or (
            ev_after is not None and len(ev_after) != width
        ):
            project(env, router, schemas)  # raises, naming the event
        if proj.keyless:
            before = proj.values(ev_before) if ev_before is not None else None
            after = proj.values(ev_after) if ev_after is not None else None
            tc.ordered.append(KeylessChange(ev.op, proj.columns, before, after, env))
            continue
        if ev.op is Op.DELETE:
            assert ev_before is not None
            key = proj.key(ev_before)
            tc.delete(key, proj.key_columns, env)
            if tracked:
                seen(proj, key, ev_before)
            continue
        assert ev_after is not None
        key = proj.key(ev_after)
        if ev.op is Op.UPDATE and ev_before is not None:
            old = proj.key(ev_before)
            if old != key:
                tc.delete(old, proj.key_columns, env)
                if tracked:
                    seen(proj, old, ev_before)
            elif tracked:
                seen(proj, key, ev_before)
        tc.upsert(key, proj.columns, proj.values(ev_after), env)
        if tracked:
            seen(proj, key, ev_after)
    column_folds = _Folds(folds)
    return _shard(
        tables, _clear_conflicts(tables, images, uniques, column_folds), shard_of, column_folds
    )


ImageRow = tuple[Op, int, Sequence[str] | None, Sequence[str] | None]
"""(op, schema id, before, after) of a row change, its images as literals (`collapse_images`)."""


def collapse_images(
    rows: Sequence[ImageRow],
    envelope: Callable[[int], Envelope],
    placeholder: Envelope,
    router: Router,
    schemas: SchemaLookup,
    unique_keys: Callable[[Target], Sequence[Sequence[str]]] = lambda t: (),
    generated: Callable[[Target], frozenset[str]] = lambda t: frozenset(),
    folds: Callable[[Target], Mapping[str, Fold]] = lambda t: {},
) -> dict[Target, TableChanges] | None:
    """`collapse` (one shard) of rows given without events: what the throughput mode's write
    tasks hold (`throughput`), whose rows would otherwise each become a `RowChange` only to be
    taken apart here again. `rows` are in release order; `envelope(i)` builds row i's envelope,
    asked only to name a bad row in an error; every change holds `placeholder` instead (the
    write tasks name positions by the envelope only in errors). None when a row's table is
    keyless or has another unique key (conflict groups need the images collapse keeps): the
    caller collapses the events instead. Equal to `collapse` over the same rows' events
    (`tests/unit/spark_apply/test_throughput_rows.py`)."""
    tables: dict[Target, TableChanges] = {}
    writable = _Writable(generated)

    def changes(proj: Projection) -> TableChanges:
        tc = tables.get(proj.target)
        if tc is None:
            tc = tables[proj.target] = TableChanges(proj.target, proj.key_columns)
        return tc

    def other_keys(proj: Projection) -> tuple[Sequence[str], ...]:
        mine = {c.lower() for c in proj.key_columns}
        return tuple(k for k in unique_keys(proj.target) if {c.lower() for c in k} != mine)

    shared: dict[int, tuple[Projection, TableChanges, int, tuple[str, ...]] | None] = {}
    delete, update = Op.DELETE, Op.UPDATE
    for i, (op, schema_id, before, after) in enumerate(rows):
        try:
            entry = shared[schema_id]
        except KeyError:
            found = _shared(envelope(i), router, schemas, writable, changes, other_keys)
            if found is not None and (found[0].keyless or found[2]):
                return None
            entry = shared[schema_id] = (
                None if found is None else (found[0], found[1], found[3], found[0].key_columns)
            )
        if entry is None:
            continue
        proj, tc, width, key_columns = entry
        if (before is not None and len(before) != width) or (
            after is not None and len(after) != width
        ):
            got = len(before if before is not None and len(before) != width else after or ())
            raise BadEventError(
                f"image has {got} values, schema {schema_id} of {proj.target} has {width} columns",
                envelope(i).position,
            )
        if op is delete:
            assert before is not None
            key = proj.key(before)
            tc.upserts.pop(key, None)
            tc.deletes[key] = (key_columns, placeholder)
            continue
        assert after is not None
        key = proj.key(after)
        if op is update and before is not None:
            old = proj.key(before)
            if old != key:
                tc.upserts.pop(old, None)
                tc.deletes[old] = (key_columns, placeholder)
        tc.deletes.pop(key, None)
        tc.upserts[key] = (proj.columns, proj.values(after), placeholder)
    return _shard(tables, {}, lambda t, k: 0, _Folds(folds)).get(0, {})


def _shared(
    env: Envelope,
    router: Router,
    schemas: SchemaLookup,
    writable: Callable[[Projection], Projection],
    changes: Callable[[Projection], TableChanges],
    other_keys: Callable[[Projection], tuple[Sequence[str], ...]],
) -> tuple[Projection, TableChanges, bool, int] | None:
    """What collapse keeps per schema id (None: no route takes its table)."""
    proj = project(env, router, schemas)
    if proj is None:
        return None
    table = schemas(env.event.schema_id)  # type: ignore[union-attr]
    assert table is not None  # project found it
    proj = writable(proj)
    return proj, changes(proj), bool(other_keys(proj)), len(table.columns)


class _Folds:
    """The folds of a target's columns, per column list, built once."""

    def __init__(self, folds: Callable[[Target], Mapping[str, Fold]]) -> None:
        self._folds = folds
        self._found: dict[tuple[Target, tuple[str, ...]], tuple[Fold, ...]] = {}

    def __call__(self, target: Target, columns: Sequence[str]) -> tuple[Fold, ...]:
        key = (target, tuple(columns))
        found = self._found.get(key)
        if found is None:
            of = self._folds(target)
            found = self._found[key] = tuple(of.get(c.lower(), Fold.TEXT) for c in columns)
        return found


class _Writable:
    """Projections without the target's generated columns, built once per projection."""

    def __init__(self, generated: Callable[[Target], frozenset[str]]) -> None:
        self._generated = generated
        self._found: dict[tuple[Target, tuple[str, ...]], Projection] = {}

    def __call__(self, proj: Projection) -> Projection:
        key = (proj.target, proj.columns)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = _without(proj, self._generated(proj.target))
        return found


def _without(proj: Projection, generated: frozenset[str]) -> Projection:
    """`proj` without the `generated` columns that are not part of its key."""
    keep = [
        i
        for i, c in enumerate(proj.columns)
        if c.lower() not in generated or i in proj.key_positions
    ]
    if len(keep) == len(proj.columns):
        return proj
    return replace(
        proj,
        columns=tuple(proj.columns[i] for i in keep),
        indexes=tuple(proj.indexes[i] for i in keep),
        key_positions=tuple(keep.index(p) for p in proj.key_positions),
    )


def _clear_conflicts(
    tables: dict[Target, TableChanges],
    images: dict[Target, dict[tuple[Value, ...], list[tuple[tuple[str, ...], tuple[Value, ...]]]]],
    uniques: dict[Target, tuple[Sequence[str], ...]],
    folds: _Folds,
) -> dict[Target, list[list[tuple[Value, ...]]]]:
    """Mark the upserted keys of each conflict group to be deleted first; the groups."""
    groups: dict[Target, list[list[tuple[Value, ...]]]] = {}
    for target, per in images.items():
        tc = tables[target]
        found = groups[target] = conflict_groups(per, uniques[target], partial(folds, target))
        for group in found:
            for key in group:
                entry = tc.upserts.get(key)
                if entry is not None:
                    tc.clear[key] = (tc.key_columns, entry[2])
    return groups


def _shard(
    tables: dict[Target, TableChanges],
    groups: dict[Target, list[list[tuple[Value, ...]]]],
    shard_of: Callable[[Target, tuple[Value, ...]], int],
    folds: _Folds,
) -> dict[int, dict[Target, TableChanges]]:
    """Split each table's changes by shard: a key by its skeleton (keys the sink calls equal
    together), a conflict group by one skeleton for all, the keyless changes of a table by the
    table (one shard keeps their order)."""
    out: dict[int, dict[Target, TableChanges]] = {}
    for target, tc in tables.items():
        key_folds = folds(target, tc.key_columns)
        skeletons: dict[tuple[Value, ...], tuple[Value, ...]]
        if all(f is Fold.EXACT for f in key_folds):
            skeletons = {k: k for k in (*tc.deletes, *tc.upserts)}  # numbers, dates: cheap
        else:
            skeletons = {k: sink_key(k, key_folds) for k in (*tc.deletes, *tc.upserts)}  # type: ignore[arg-type]
            _clear_equal(tc, skeletons)
        owner = owners(skeletons, groups.get(target, []))
        shard_keys: dict[int, list[tuple[Value, ...]]] = {}
        for key, skeleton in owner.items():
            shard_keys.setdefault(shard_of(target, skeleton), []).append(key)
        keyless_shard = shard_of(target, ()) if tc.ordered else None
        if keyless_shard is not None:
            shard_keys.setdefault(keyless_shard, [])
        if len(shard_keys) == 1:
            out.setdefault(next(iter(shard_keys)), {})[target] = tc
            continue
        for shard, keys in shard_keys.items():
            out.setdefault(shard, {})[target] = tc.subset(keys, shard == keyless_shard)
    return out


def _clear_equal(tc: TableChanges, skeletons: dict[tuple[Value, ...], tuple[Value, ...]]) -> None:
    """Mark the upserted keys that share their skeleton with another touched key to be
    deleted first: one row to the sink, whichever of the keys it holds now."""
    if len(set(skeletons.values())) == len(skeletons):
        return
    seen: dict[tuple[Value, ...], int] = {}
    for skeleton in skeletons.values():
        seen[skeleton] = seen.get(skeleton, 0) + 1
    for key, (_cols, _values, env) in tc.upserts.items():
        if seen[skeletons[key]] > 1:
            tc.clear[key] = (tc.key_columns, env)


def upsert_statements(
    target: Target,
    columns: Sequence[str],
    key_columns: Sequence[str],
    rows: Iterable[Sequence[Value]],
    max_bytes: int = STATEMENT_BYTES,
    *,
    rendered: bool = False,
) -> Iterator[str]:
    """Multi-row ``INSERT … VALUES (…),(…) ON DUPLICATE KEY UPDATE`` statements (pre-escaped).
    `rendered`: the rows hold literals (collapse's), not values."""
    cols = ", ".join(quote(c) for c in columns)
    rest = [c for c in columns if c not in key_columns] or list(key_columns[:1])
    update = ", ".join(f"{quote(c)} = VALUES({quote(c)})" for c in rest)
    head = f"INSERT INTO {target.quoted} ({cols}) VALUES "
    tail = f" ON DUPLICATE KEY UPDATE {update}"
    render = row_of_literals if rendered else row_literal
    return chunks(head, tail, map(render, rows), max_bytes)


def delete_statements(
    target: Target,
    key_columns: Sequence[str],
    keys: Iterable[Sequence[Value]],
    max_bytes: int = STATEMENT_BYTES,
    *,
    rendered: bool = False,
) -> Iterator[str]:
    """``DELETE … WHERE key IN (…)`` statements (pre-escaped; `rendered`: keys of literals)."""
    if len(key_columns) == 1:
        head = f"DELETE FROM {target.quoted} WHERE {quote(key_columns[0])} IN ("
        one = _same if rendered else literal
        items: Iterable[str] = (one(k[0]) for k in keys)
    else:
        cols = "(" + ", ".join(quote(c) for c in key_columns) + ")"
        head = f"DELETE FROM {target.quoted} WHERE {cols} IN ("
        items = map(row_of_literals if rendered else row_literal, keys)
    return chunks(head, ")", items, max_bytes)


def _same(literal_text: Value) -> str:
    assert isinstance(literal_text, str)
    return literal_text


def _matches(columns: Sequence[str], values: Sequence[Value], one: Callable[[Value], str]) -> str:
    # NULL-safe: a keyless row is found by every column, NULLs included.
    pairs = zip(columns, values, strict=True)
    return " AND ".join(f"{quote(c)} <=> {one(v)}" for c, v in pairs)


def keyless_statements(
    target: Target,
    changes: Sequence[KeylessChange],
    max_bytes: int = STATEMENT_BYTES,
    *,
    rendered: bool = False,
) -> Iterator[str]:
    """The statements of a keyless table's changes, in order: runs of inserts as multi-row
    ``INSERT``, each delete and update on one row matching every column (``LIMIT 1``: of
    several equal rows, one). `rendered`: the images hold literals, not values."""
    one = _same if rendered else literal
    row = row_of_literals if rendered else row_literal
    run: list[str] = []
    run_cols: tuple[str, ...] = ()
    for change in changes:
        if change.op is Op.INSERT or change.op is Op.READ:  # a snapshot row (PROTOCOL.md §9.5)
            assert change.after is not None
            if run and change.columns != run_cols:
                yield from _inserts(target, run_cols, run, max_bytes)
                run = []
            run_cols = change.columns
            run.append(row(change.after))
            continue
        if change.op is Op.UPDATE and change.before == change.after:
            continue  # the route filters out every column that changed
        if run:
            yield from _inserts(target, run_cols, run, max_bytes)
            run = []
        assert change.before is not None
        where = _matches(change.columns, change.before, one)
        if change.op is Op.DELETE:
            yield f"DELETE FROM {target.quoted} WHERE {where} LIMIT 1"
        else:
            assert change.after is not None
            sets = ", ".join(
                f"{quote(c)} = {one(v)}" for c, v in zip(change.columns, change.after, strict=True)
            )
            yield f"UPDATE {target.quoted} SET {sets} WHERE {where} LIMIT 1"
    if run:
        yield from _inserts(target, run_cols, run, max_bytes)


def _inserts(
    target: Target, columns: Sequence[str], rows: list[str], max_bytes: int
) -> Iterator[str]:
    head = f"INSERT INTO {target.quoted} ({', '.join(quote(c) for c in columns)}) VALUES "
    return chunks(head, "", rows, max_bytes)
