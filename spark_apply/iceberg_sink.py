"""The Iceberg sink: each step's rows into Iceberg tables, exactly once (issue #34, first slice).

Lifecycle: ``IcebergSink(...)`` does no I/O; `start()` connects the MySQL state database that
keeps the job's checkpoints (head, state, stash: `ledger.Ledger`, the MySQL sink's), loads the
Iceberg catalog and refuses, in one line, a routed column no Iceberg type holds exactly
(`iceberg_types`), before Spark starts; `apply(batch_id, plan)` is `sinks.Sink.apply` (the
MySQL sink's step loop) with `IcebergRows` as the kind of sink: the rows of each step written
by `IcebergTables.write_step` instead of SQL; `close()`. The tables' schemas and their
evolution: `iceberg_schema`.

Guarantee: exactly once, per step. A step's rows go into each of its tables in one Iceberg
commit whose snapshot summary carries ``rowbus.job``, ``rowbus.batch`` and ``rowbus.step``;
then the MySQL transaction records the step's checkpoint and moves the head (as for the
MySQL sink). A driver killed between the two replays the step (same plan: same state, same
records): each table whose snapshots already carry the step's summary is skipped, the others
are written. The current-state form is idempotent besides (delete the step's keys, append
their last images), the change log is not: its summary is what keeps an event from being
appended twice.

Data files are written on the driver (pyarrow table → pyiceberg) or, with ``apply.iceberg.writers:
executors``, by executor tasks (`iceberg_files`), one Spark job per step; either way the driver
commits each table's files of the step in one commit (spark_apply README "The Iceberg sink").

Forms, per target table (`IcebergSettings.forms`):

- ``current``: the table's current state. The step's row events are folded per primary key
  (exact, binary equality: Iceberg compares values, not collations) into the key's last image
  or its deletion; one commit deletes every row whose key the step touched and appends the
  last images (``overwrite by key``, chosen by `benchmarks.iceberg`). The primary key is the
  table's identifier fields. A table without a primary key (PROTOCOL.md §9.3: a row is
  all its columns, equal rows may repeat) has no identifier fields and its changes are
  applied one by one, in order (`iceberg_keyless`): the rows equal to a
  before image are read, deleted and appended again as the changes leave them, in one
  commit — exact, since equal rows are indistinguishable, and not idempotent: the step's
  summary is what keeps a replay from applying it twice, as for the change log.
- ``changelog``: every row event appended: ``_op``, ``_ts``, ``_source``, binlog file, offset
  and GTID, transaction id and index, Kafka topic, partition and offset, then ``before_<c>``
  and ``after_<c>`` for each column.

Schema changes: every DDL of a routed table with a schema after it evolves the tables to it
in one schema commit (`iceberg_schema.evolve_table`: ADD COLUMN with a constant DEFAULT as
initial default, DROP COLUMN — the change log keeps the column, NULL from then on —, RENAME /
CHANGE COLUMN from the statement's column renames, widening int→long, float→double, decimal
precision, a new primary key as the identifier fields); RENAME TABLE renames both forms' tables
in the catalog, DROP TABLE and DROP DATABASE drop the current-state tables and delete their
files (the change log keeps its history); what Iceberg cannot express (another type change,
an expression DEFAULT added to rows, a rename out of the routes) is refused in one line before
anything of it is applied, and so is an ALTER that narrows a column (VARCHAR(10)→VARCHAR(3))
in a source session without a STRICT sql_mode, which cut the source's rows without row events
(`iceberg_schema.refuse_narrowing`; docs/semantics.md). TRUNCATE TABLE empties the
current-state table and appends a ``truncate`` event to the change log, each commit marked
as the step's DDL part (``rowbus.ddl``), so a replay skips it. The evolution compares the
wanted schema with the table's, a rename finds the new name there, a drop finds no table: a
replayed DDL finds nothing to do.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rowbus.protocol.ddl import DdlKind, TableName, parse_ddl
from rowbus.protocol.events import (
    DdlChange,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
)
from rowbus.protocol.values import Value
from rowbus.routing.routes import Router, Target
from rowbus.spark_apply.changes import SchemaLookup, project
from rowbus.spark_apply.exceptions import ApplyError, BadEventError
from rowbus.spark_apply.iceberg_catalog import BATCH, DDL, JOB, STEP, open_catalog
from rowbus.spark_apply.iceberg_faults import armed
from rowbus.spark_apply.iceberg_files import ExecutorFiles, FileWork, slices
from rowbus.spark_apply.iceberg_keyless import keyless_changes, rewrite
from rowbus.spark_apply.iceberg_maintenance import Maintenance, purge
from rowbus.spark_apply.iceberg_schema import META as _META
from rowbus.spark_apply.iceberg_schema import (
    Layout,
    evolve_table,
    layout,
    refuse_narrowing,
    schema_of,
    strict_session,
)
from rowbus.spark_apply.iceberg_types import (
    Converter,
    IcebergError,
    Kind,
    ZeroDateError,
    column_arrays,
)
from rowbus.spark_apply.ledger import Ledger
from rowbus.spark_apply.literals import LitImage
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import IcebergSettings, SinkConnection
from rowbus.spark_apply.sink_conn import retry_conflicts
from rowbus.spark_apply.sinks import Sink, StepWrite
from rowbus.spark_apply.snapshots import SeenSets

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 5
"""Tries of one table's commit of a step when other writers' commits beat it."""


@dataclass(slots=True)
class _TableStep:
    """One target's share of a step: its layout, the last image (None: deleted) per key in
    first-touched order, and the change log's rows."""

    layout: Layout
    last: dict[tuple[Value, ...], tuple[Value, ...] | None] = field(default_factory=dict)
    events: list[tuple[Envelope, RowChange]] = field(default_factory=list)


class IcebergTables:
    """The Iceberg side of the sink: the catalog, the tables of each target, a step's writes
    and the schema evolution. Lifecycle: the constructor does no I/O; `start()` loads the
    catalog."""

    def __init__(
        self, settings: IcebergSettings, router: Router, schemas: SchemaLookup, job: str
    ) -> None:
        self.settings = settings
        self._router = router
        self._schemas = schemas
        self._job = job
        self._catalog: Any = None
        self._null_zero_dates = settings.zero_dates == "null"
        self._tables: dict[tuple[str, str], Any] = {}
        """Loaded tables by identifier (`_table`)."""

    def start(self) -> IcebergTables:
        self._catalog = armed(open_catalog(self.settings))
        return self

    def check(self, tables: Iterable[TableSchema]) -> None:
        """Refuse, in one line, the first routed column of `tables` no Iceberg type holds."""
        for table in tables:
            proj = self._router.projection(table)
            if proj is None:
                continue
            layout(proj, table, self._null_zero_dates)

    # -- names -----------------------------------------------------------------------------

    def _identifier(self, target: Target, changelog: bool) -> tuple[str, str]:
        name = target.table + (self.settings.changelog_suffix if changelog else "")
        return (self.settings.namespace or target.schema, name)

    def _forms(self) -> list[bool]:
        """The forms to write, as `changelog` flags."""
        return [form == "changelog" for form in self.settings.forms]

    # -- writing ---------------------------------------------------------------------------

    def write_step(self, batch_id: int, step: int, rows: Iterable[Envelope]) -> int:
        """Write a step's row events: one commit per table; a table whose snapshots already
        carry this (job, batch, step) is skipped. Returns the rows written. ``writers:
        executors``: the data files written first, by one Spark job, then committed here."""
        todo = [(part, form) for part in self._fold(rows).values() for form in self._forms()]
        executors = self.settings.writers == "executors"
        files = self._executor_files(todo, batch_id, step) if executors else {}
        written = 0
        for part, changelog in todo:
            ident = self._identifier(part.layout.target, changelog)
            written += self._write_table(part, changelog, batch_id, step, files.get(ident))
        return written

    def _executor_files(
        self, todo: Sequence[tuple[_TableStep, bool]], batch_id: int, step: int
    ) -> dict[tuple[str, str], list[Any]]:
        """The data files of each table the step writes (not already holding the step, with
        rows to append), written by executor tasks in one Spark job (`_file_works`)."""
        writer, name = ExecutorFiles(), f"{self._job}-b{batch_id}-s{step}"
        parts = writer.parallelism()
        works: list[FileWork] = []
        owners: list[tuple[str, str]] = []
        for part, changelog in todo:
            table = self._table(part.layout, changelog)
            if not changelog and part.layout.projection.keyless:
                continue  # rewritten on the driver from the rows it reads (`_rewrite_keyless`)
            if not _committed(table, self._job, batch_id, step):  # else `_write_table` skips
                pieces = _file_works(table, part, changelog, name, parts)
                works += pieces
                owners += [self._identifier(part.layout.target, changelog)] * len(pieces)
        files: dict[tuple[str, str], list[Any]] = {}
        for ident, written in zip(owners, writer.write(works), strict=True):
            files.setdefault(ident, []).extend(written)
        return files

    def _write_table(
        self, part: _TableStep, changelog: bool, batch_id: int, step: int, files: list[Any] | None
    ) -> int:
        """One table's commit of a step, skipped when a snapshot holds it; a commit another
        writer's commit beat (a compaction) is tried again on the table as it is then (with
        the same `files`, when executors wrote them: they hold the step's rows, not the
        table's)."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        ident = self._identifier(part.layout.target, changelog)
        marker = {JOB: self._job, BATCH: str(batch_id), STEP: str(step)}
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            table = self._table(part.layout, changelog)
            if _committed(table, self._job, batch_id, step):
                log.info("batch %d step %d: %s.%s holds it; skipped", batch_id, step, *ident)
                return 0
            try:
                if changelog:
                    return self._append_events(table, part, marker, files)
                if part.layout.projection.keyless:
                    return _rewrite_keyless(table, part, marker)
                return self._overwrite_keys(table, part, marker, files)
            except (CommitFailedException, ValidationException) as exc:
                # pyiceberg retried the commit itself, or found files added under the keys
                # it deletes (a rewrite of them): begin again on the table as it is now.
                self._tables.pop(ident, None)
                if attempt == COMMIT_ATTEMPTS:
                    raise IcebergError(
                        f"{'.'.join(ident)}: batch {batch_id} step {step} lost its commit "
                        f"{COMMIT_ATTEMPTS} times to other writers ({exc})"
                    ) from exc
                log.info("%s.%s: commit conflict (%s); trying again", *ident, exc)
        raise AssertionError("unreachable")

    def _fold(self, rows: Iterable[Envelope]) -> dict[Target, _TableStep]:
        """The step's row events per target: each key's last image, and every event."""
        parts: dict[Target, _TableStep] = {}
        layouts: dict[int, Layout | None] = {}
        for env in rows:
            ev = env.event
            if not isinstance(ev, RowChange):
                continue
            if ev.schema_id not in layouts:
                proj = project(env, self._router, self._schemas)
                table = self._schemas(ev.schema_id)
                assert table is not None  # project() refused an unknown one
                layouts[ev.schema_id] = (
                    None if proj is None else layout(proj, table, self._null_zero_dates)
                )
            lay = layouts[ev.schema_id]
            if lay is None:
                continue
            if isinstance(ev.before, LitImage) or isinstance(ev.after, LitImage):
                raise BadEventError(
                    "a rendered row reached the Iceberg sink (its values are SQL literals)",
                    env.position,
                )
            part = parts.get(lay.target)
            if part is None:
                part = parts[lay.target] = _TableStep(lay)
            elif part.layout.names != lay.names:
                raise IcebergError(
                    f"{lay.target}: rows of two layouts in one step ({part.layout.names} and "
                    f"{lay.names}): routes that merge tables into one Iceberg table need one "
                    "schema (not supported yet)"
                )
            part.events.append((env, ev))
            p = lay.projection
            if ev.before is not None and (ev.after is None or p.key(ev.before) != p.key(ev.after)):
                part.last[p.key(ev.before)] = None
            if ev.after is not None:
                part.last[p.key(ev.after)] = p.values(ev.after)
        return parts

    def _overwrite_keys(
        self, table: Any, part: _TableStep, marker: dict[str, str], files: list[Any] | None
    ) -> int:
        """Current state: delete every row of a touched key, append the keys' last images
        (or the executors' `files` of them), in one commit."""
        lay = part.layout
        keys = list(part.last)
        positions = [lay.names.index(k) for k in lay.key]
        key_convs = [lay.converters[p] for p in positions]
        converted = [tuple(c(v) for c, v in zip(key_convs, k, strict=True)) for k in keys]
        data = None
        if files is None:
            images = [img for img in part.last.values() if img is not None]
            data = _images_arrow(table, lay.kinds, lay.converters, lay.names, images)
        with table.transaction() as tx:
            if table.current_snapshot() is not None:
                with warnings.catch_warnings():
                    # "did not match any records": keys the step inserts for the first time
                    warnings.filterwarnings("ignore", "Delete operation did not match")
                    tx.delete(_key_filter(lay.key, converted), snapshot_properties=marker)
            if data is not None:
                tx.append(data, snapshot_properties=marker)
            else:
                _append_files(tx, files or [], marker)
        return len(keys)

    def _append_events(
        self, table: Any, part: _TableStep, marker: dict[str, str], files: list[Any] | None
    ) -> int:
        """Change log: every event of the step, in order, appended in one commit (or the
        executors' `files` of them)."""
        if files is not None:
            with table.transaction() as tx:
                _append_files(tx, files, marker)
            return len(part.events)
        lay = part.layout
        rows = _event_rows(part)
        table.append(
            _events_arrow(table, lay.kinds, lay.converters, lay.names, rows),
            snapshot_properties=marker,
        )
        return len(part.events)

    # -- tables and their schemas ------------------------------------------------------------

    def _table(self, lay: Layout, changelog: bool) -> Any:
        """The target's table of one form, created or evolved to `lay`."""
        from pyiceberg.exceptions import NoSuchTableError

        ident = self._identifier(lay.target, changelog)
        table = self._tables.get(ident)
        if table is None:
            try:
                table = self._catalog.load_table(ident)
            except NoSuchTableError:
                self._catalog.create_namespace_if_not_exists(ident[0])
                table = self._catalog.create_table(ident, schema=schema_of(lay, changelog))
                log.info("created Iceberg table %s.%s", *ident)
        # Kept between steps: pyiceberg refreshes a table's metadata with each commit made
        # through it, and a commit beaten by another writer drops it (`_write_table`).
        table = self._tables[ident] = evolve_table(
            self._catalog, table, lay, changelog, ".".join(ident)
        )
        return table

    def evolve(
        self,
        table_schema: TableSchema,
        renames: Mapping[str, str] | None = None,
        lenient: bool = False,
    ) -> None:
        """A DDL's schema after it (and its column renames, old → new), applied to the
        tables of its target (those that exist). `lenient`: an ALTER the source ran without
        a STRICT sql_mode, which cuts the values a narrowed column holds without row events:
        a narrowing is refused (`iceberg_schema.refuse_narrowing`) before anything of it is
        applied (the change log alone is not refused: it holds what the source wrote)."""
        from pyiceberg.exceptions import NoSuchTableError

        proj = self._router.projection(table_schema)
        if proj is None:
            return
        lay = layout(proj, table_schema, self._null_zero_dates)
        if lenient and False in self._forms():
            ident = self._identifier(lay.target, False)
            try:
                current = self._catalog.load_table(ident)
            except NoSuchTableError:
                pass  # no rows held: nothing to diverge
            else:
                refuse_narrowing(current, lay, ".".join(ident), renames or {})
        for changelog in self._forms():
            ident = self._identifier(lay.target, changelog)
            self._tables.pop(ident, None)
            try:
                table = self._catalog.load_table(ident)
            except NoSuchTableError:
                continue  # created by its first row, with the schema then
            self._tables[ident] = evolve_table(
                self._catalog, table, lay, changelog, ".".join(ident), renames
            )

    def rename(self, old: Target, new: Target) -> None:
        """RENAME TABLE: each form's table of `old` renamed to `new`'s name; a replay finds
        it done (`old` gone, `new` there) and does nothing."""
        from pyiceberg.exceptions import NoSuchTableError

        for changelog in self._forms():
            src, dst = self._identifier(old, changelog), self._identifier(new, changelog)
            self._tables.pop(src, None)
            self._tables.pop(dst, None)
            if self._catalog.table_exists(dst):
                if self._catalog.table_exists(src):
                    raise IcebergError(
                        f"RENAME of {'.'.join(src)} to {'.'.join(dst)}: both Iceberg tables "
                        "exist: drop or rename the second one, then restart the job"
                    )
                continue
            try:
                self._catalog.create_namespace_if_not_exists(dst[0])
                self._catalog.rename_table(src, dst)
            except NoSuchTableError:
                continue  # nothing written to it yet

    def drop(self, target: Target) -> None:
        """DROP TABLE: the current-state table dropped and its files deleted
        (`iceberg_maintenance.purge`; a re-CREATE starts an empty one); the change log kept,
        its history being what it is for, and evolved by the next CREATE's schema like any
        DDL."""
        from pyiceberg.exceptions import NoSuchTableError

        if "current" not in self.settings.forms:
            return
        ident = self._identifier(target, changelog=False)
        self._tables.pop(ident, None)
        # Not there: never written, or dropped by the run this one replays.
        with contextlib.suppress(NoSuchTableError):
            purge(self._catalog, ident)

    def truncate(self, env: Envelope, batch_id: int, step: int) -> None:
        """A TRUNCATE TABLE: the current-state table emptied, a ``truncate`` event appended to
        the change log (its images NULL), each in one commit marked as the step's DDL part,
        so a replay skips what it committed."""
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.expressions import AlwaysTrue

        ev = env.event
        assert isinstance(ev, DdlChange)
        assert ev.table is not None
        target = self._router.target(ev.schema, ev.table, ev.source)
        if target is None:
            return
        marker = {JOB: self._job, BATCH: str(batch_id), STEP: str(step), DDL: "1"}
        for changelog in self._forms():
            self._tables.pop(self._identifier(target, changelog), None)
            try:
                table = self._catalog.load_table(self._identifier(target, changelog))
            except NoSuchTableError:
                continue  # nothing written yet: nothing to empty, no history to extend
            if _committed(table, self._job, batch_id, step, ddl=True):
                continue
            if not changelog:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "Delete operation did not match")
                    table.delete(AlwaysTrue(), snapshot_properties=marker)
                continue
            import pyarrow as pa

            txn = ev.txn
            values = (
                "truncate",
                ev.ts,
                ev.source,
                ev.position.file,
                ev.position.offset,
                ev.position.gtid,
                txn.id if txn else None,
                txn.index if txn else None,
                env.topic,
                env.partition,
                env.offset,
            )
            arrays = [
                pa.array([v], type=_meta_arrow(t)) for v, (_, t) in zip(values, _META, strict=True)
            ]
            table.append(_arrow(table, [n for n, _ in _META], arrays), snapshot_properties=marker)

    def expire(self, batch_id: int, keep: int) -> int:
        """Expire, in every table this sink holds loaded, the snapshots older than the first
        of this job's commits of batch `batch_id - keep` or later (never the current one); a
        replay of a batch at or after that one still finds its commits. Returns how many."""
        expired = 0
        for ident, table in list(self._tables.items()):
            snapshots = table.metadata.snapshots
            first_kept = next(
                (
                    i
                    for i, snap in enumerate(snapshots)
                    if snap.summary is not None
                    and snap.summary.additional_properties.get(JOB) == self._job
                    and int(snap.summary.additional_properties[BATCH]) >= batch_id - keep
                ),
                None,
            )
            if not first_kept:
                continue
            current = table.current_snapshot()
            ids = [
                snap.snapshot_id
                for snap in snapshots[:first_kept]
                if current is None or snap.snapshot_id != current.snapshot_id
            ]
            if ids:
                table.maintenance.expire_snapshots().by_ids(ids).commit()
                self._tables[ident] = self._catalog.load_table(ident)
                expired += len(ids)
        return expired

    def holds_rows(self, target: Target) -> bool:
        """Whether the current-state table of `target` exists and holds a row."""
        from pyiceberg.exceptions import NoSuchTableError

        if "current" not in self.settings.forms:
            return False
        try:
            table = self._catalog.load_table(self._identifier(target, changelog=False))
        except NoSuchTableError:
            return False
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.summary is None:
            return False
        return int(snapshot.summary.additional_properties.get("total-records", "0")) > 0

    def maintain(self) -> None:
        """Compaction, expiry and orphan removal (`iceberg_maintenance`) of the tables this
        job has loaded; their cached metadata is stale afterwards, also after a failure."""
        try:
            Maintenance(self._catalog, self.settings.maintenance).run(list(self._tables))
        finally:
            self._tables.clear()

    def close(self) -> None:
        self._tables.clear()
        self._catalog = None


def _file_works(
    table: Any, part: _TableStep, changelog: bool, name: str, parts: int
) -> list[FileWork]:
    """A table's rows of the step cut into at most `parts` contiguous slices, one task's work
    each: the change log's events in step order, or the current state's last images (one per
    key after `IcebergTables._fold`, so no key is in two tasks). None when it has no rows."""
    lay = part.layout
    if changelog:
        build: Callable[..., Any] = _events_arrow
        rows: Sequence[Any] = _event_rows(part)
    else:
        build = _images_arrow
        rows = [img for img in part.last.values() if img is not None]
    meta, io = table.metadata.model_dump_json(), dict(table.io.properties)
    return [
        FileWork(meta, io, name, build, (lay.kinds, lay.converters, lay.names), piece)
        for piece in slices(rows, parts)
    ]


def _event_rows(part: _TableStep) -> list[tuple[tuple[Any, ...], Sequence[Value], Sequence[Value]]]:
    """The change log's rows of a step's events, in order: (the `_META` values, the before
    image, the after image), projected, not yet converted."""
    lay = part.layout
    p = lay.projection
    empty = (None,) * len(lay.names)
    return [
        (
            (
                ev.op.value,
                ev.ts,
                ev.source,
                ev.position.file,
                ev.position.offset,
                ev.position.gtid,
                ev.txn.id,
                ev.txn.index,
                env.topic,
                env.partition,
                env.offset,
            ),
            p.values(ev.before) if ev.before is not None else empty,
            p.values(ev.after) if ev.after is not None else empty,
        )
        for env, ev in part.events
    ]


def _events_arrow(
    table: Any,
    kinds: Sequence[Kind],
    converters: Sequence[Converter],
    names: Sequence[str],
    rows: Sequence[tuple[tuple[Any, ...], Sequence[Value], Sequence[Value]]],
) -> Any:
    """The change log's `rows` (`_event_rows`) as Arrow in `table`'s schema (a table or its
    metadata); runs on the driver or in an executor task."""
    import pyarrow as pa

    meta = list(zip(*(r[0] for r in rows), strict=True)) if rows else [() for _ in _META]
    arrays = [
        pa.array(list(col), type=_meta_arrow(t)) for col, (_, t) in zip(meta, _META, strict=True)
    ]
    arrays += column_arrays(kinds, converters, [r[1] for r in rows])
    arrays += column_arrays(kinds, converters, [r[2] for r in rows])
    columns = [n for n, _ in _META] + [f"before_{c}" for c in names]
    columns += [f"after_{c}" for c in names]
    return _arrow(table, tuple(columns), arrays)


def _images_arrow(
    table: Any,
    kinds: Sequence[Kind],
    converters: Sequence[Converter],
    names: Sequence[str],
    images: Sequence[Sequence[Value]],
) -> Any:
    """The current state's last `images` as Arrow in `table`'s schema (a table or its
    metadata); runs on the driver or in an executor task."""
    return _arrow(table, names, column_arrays(kinds, converters, images))


def _append_files(tx: Any, files: Sequence[Any], marker: dict[str, str]) -> None:
    """Append data files the executors wrote, in `tx`, as one fast append carrying `marker`."""
    with tx.update_snapshot(snapshot_properties=marker).fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


def _rewrite_keyless(table: Any, part: _TableStep, marker: dict[str, str]) -> int:
    """Current state of a table without a primary key (PROTOCOL.md §9.3): the step's changes
    applied one by one, in order, in one commit (`iceberg_keyless`)."""
    lay = part.layout

    def stored(images: list[tuple[Value, ...]]) -> list[tuple[Any, ...]]:
        # As the table stores them (its Arrow types): what a scan returns.
        data = _arrow(table, lay.names, column_arrays(lay.kinds, lay.converters, images))
        return [tuple(r.values()) for r in data.to_pylist()]

    return rewrite(table, keyless_changes(lay, part.events, stored), marker)


def _arrow(table: Any, names: Sequence[str], arrays: list[Any]) -> Any:
    """The arrays as an Arrow table in the Iceberg table's schema (its order, its nullability,
    its field ids)."""
    import pyarrow as pa

    wanted = table.schema().as_arrow()
    data = pa.Table.from_arrays(arrays, names=list(names))
    # A column the table keeps but the rows lack (the change log's dropped ones) is NULL.
    columns = [
        data.column(f.name) if f.name in names else pa.nulls(data.num_rows, f.type) for f in wanted
    ]
    return pa.Table.from_arrays(columns, names=[f.name for f in wanted]).cast(wanted)


def _meta_arrow(name: str) -> Any:
    import pyarrow as pa

    return {"string": pa.large_string(), "long": pa.int64(), "int": pa.int32()}[name]


def _key_filter(columns: Sequence[str], keys: Sequence[tuple[Any, ...]]) -> Any:
    """The filter matching the rows of `keys` (values of `columns`)."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    if len(columns) == 1:
        return In(term=columns[0], literals=[k[0] for k in keys])
    terms = [
        And(*[EqualTo(term=c, value=v) for c, v in zip(columns, k, strict=True)]) for k in keys
    ]
    return terms[0] if len(terms) == 1 else Or(*terms)


def _committed(table: Any, job: str, batch_id: int, step: int, ddl: bool = False) -> bool:
    """Whether a snapshot of `table` carries (job, batch, step) — the step's DDL part when
    `ddl` (a TRUNCATE's commit, after the step's rows) —, looking from the newest back to the
    first of this job's snapshots of an earlier part."""
    wanted = (batch_id, step, int(ddl))
    for snapshot in reversed(table.metadata.snapshots):
        summary = snapshot.summary
        props = summary.additional_properties if summary is not None else {}
        if props.get(JOB) != job:
            continue
        committed = (int(props[BATCH]), int(props[STEP]), int(props.get(DDL, "0")))
        if committed == wanted:
            return True
        if committed < wanted:
            return False
    return False


class IcebergRows:
    """The Iceberg kind of sink (`sinks.SinkKind`): a step's rows into Iceberg tables
    (`IcebergTables`), its checkpoint in the state database after their commits."""

    def __init__(
        self,
        tables: IcebergTables,
        router: Router,
        seen: SeenSets,
        known: Callable[[], Iterable[TableSchema]],
    ) -> None:
        self.tables = tables
        self._router = router
        self._seen = seen
        self._known = known
        self._ledger: Ledger | None = None

    def start(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.tables.start()
        self.tables.check(self._known())

    def close(self) -> None:
        self.tables.close()

    def write_rows(self, step: StepWrite) -> None:
        assert self._ledger is not None
        try:
            written = self.tables.write_step(step.batch_id, step.index, step.step.rows)
        except ZeroDateError as exc:
            raise ApplyError(f"batch {step.batch_id} step {step.index}: {exc}") from exc
        conn = self._ledger.conn
        retry_conflicts(
            conn, lambda: step.finish(conn, written), f"batch {step.batch_id} step {step.index}"
        )

    def marker(
        self, cur: Any, marker: SnapshotBegin | SnapshotEnd, target: Target | None
    ) -> Callable[[], None] | None:
        """A snapshot marker (PROTOCOL.md §9.7). A snapshot into an empty (or new) Iceberg
        table needs nothing: its rows are all it will hold. A snapshot of a table that holds
        rows must remove the rows it does not see at its end (the MySQL sink's seen sets),
        which the Iceberg sink does not do yet: refused in one line at its begin, rather than
        leaving rows the source deleted."""
        if (
            isinstance(marker, SnapshotBegin)
            and target is not None
            and self.tables.holds_rows(target)
        ):
            raise BadEventError(
                f"snapshot {marker.snapshot} of {marker.schema}.{marker.table}: its Iceberg "
                f"table {target} holds rows, and a snapshot over existing rows (removing those "
                "it does not see) is not applied to Iceberg yet: empty the Iceberg table "
                "first, or snapshot into a new one",
                f"binlog {marker.position}",
            )
        return None

    def batch_done(self, batch_id: int) -> None:
        keep = self.tables.settings.expire_after_batches
        if keep:
            # After the batch's checkpoint: only snapshots no replay can need go.
            expired = self.tables.expire(batch_id, keep)
            if expired:
                log.info("batch %d: %d old snapshot(s) expired", batch_id, expired)
        every = self.tables.settings.maintenance.every_batches
        if every and batch_id % every == 0:  # between two batches: no commit of ours races it
            try:
                self.tables.maintain()
            except IcebergError as exc:  # other writers won every try: next time, not a stop
                log.warning("batch %d: maintenance put off: %s", batch_id, exc)

    def ddl(self, env: Envelope, batch_id: int, index: int) -> None:
        ev = env.event
        assert isinstance(ev, DdlChange)
        if ev.kind is DdlKind.TRUNCATE_TABLE and ev.table is not None:
            if self._router.sharded(ev.schema, ev.table, ev.source):
                raise BadEventError(
                    f"TRUNCATE of {ev.schema}.{ev.table}, a shard of a merged Iceberg table, is "
                    "not applied (it would empty every shard's rows): stop the job and delete "
                    "that shard's rows by hand",
                    env.position,
                )
            self.tables.truncate(env, batch_id, index)
            return
        parsed = parse_ddl(ev.statement, ev.schema)
        try:
            if ev.kind is DdlKind.RENAME_TABLE or parsed.renames:
                self._rename(ev, parsed.renames)
            if ev.kind is DdlKind.DROP_TABLE:
                for name in parsed.tables:
                    self._drop(ev, name.schema, name.table)
            if ev.kind is DdlKind.DROP_DATABASE and parsed.database is not None:
                for known in self._known():
                    if known.schema == parsed.database:
                        self._drop(ev, known.schema, known.table)
            if ev.table_schema is None:
                return
            self.tables.check([ev.table_schema])
            # Only an ALTER converts the rows a table holds (a CREATE makes a new table).
            lenient = ev.kind is DdlKind.ALTER_TABLE and not strict_session(
                ev.sql_mode, ev.statement
            )
            self.tables.evolve(ev.table_schema, dict(parsed.column_renames), lenient)
        except ApplyError as exc:
            raise BadEventError(str(exc), env.position) from exc

    def _rename(self, ev: DdlChange, renames: Iterable[tuple[TableName, TableName]]) -> None:
        """Each (old, new) of a RENAME: the Iceberg tables renamed when both names route to
        their own table; a rename into or out of the job's routes, or of a shard, refused."""
        for old, new in renames:
            src = self._router.target(old.schema, old.table, ev.source)
            dst = self._router.target(new.schema, new.table, ev.source)
            if src is None and dst is None:
                continue
            if src is None or dst is None or self._sharded(ev, old) or self._sharded(ev, new):
                raise IcebergError(
                    f"RENAME of {old} to {new} moves a table into, out of or between "
                    "shards of the job's Iceberg routes, which the sink does not apply: "
                    "route both names alike (apply.routes), or route the table out"
                )
            if src != dst:
                self.tables.rename(src, dst)

    def _drop(self, ev: DdlChange, schema: str, table: str) -> None:
        target = self._router.target(schema, table, ev.source)
        if target is None:
            return
        if self._sharded(ev, TableName(schema, table)):
            raise IcebergError(
                f"DROP of {schema}.{table}, a shard of a merged Iceberg table, is not "
                "applied (it would drop every shard's rows): stop the job and delete that "
                "shard's rows by hand"
            )
        self.tables.drop(target)

    def _sharded(self, ev: DdlChange, name: TableName) -> bool:
        return self._router.sharded(name.schema, name.table, ev.source)


class IcebergSink(Sink):
    """The job's bookkeeping in the MySQL state database (`ledger`), the rows into Iceberg
    (`IcebergRows`); see the module docstring."""

    def __init__(
        self,
        conn: SinkConnection,
        job: str,
        state_database: str,
        router: Router,
        schemas: SchemaLookup,
        settings: IcebergSettings,
        known: Callable[[], Iterable[TableSchema]],
    ) -> None:
        seen = SeenSets(router)
        self.tables = IcebergTables(settings, router, schemas, job)
        super().__init__(
            Ledger(conn, job, state_database), IcebergRows(self.tables, router, seen, known), seen
        )
