"""Throughput mode: rows stay on the executors; the driver works per batch, lane and task.

Per micro-batch (`owned.apply_owned`, called by `job.BatchApplier` in ``mode: throughput``):

1. **Read and key** (executors, `read_and_key`, persisted): each task reads its share of
   Spark's offset ranges for the batch (from Spark's offset log, `overlap.logged_offsets`)
   and of the held rows read again from Kafka itself, with the source's reader
   (`source.read_range`, rows rendered natively), and keys them in the same Python worker,
   so a row's text enters the JVM once, already keyed. Each row record's header is read
   from the rendered text, without building its event;
   the merge engine's push rules drop duplicates and rows a floor covers; each kept row gets
   its target, its owner hash (`ownership.owner`: by the target and the skeleton of its key
   under the sink's collations, `keys.sink_key`, with the folds the driver ships per target;
   a key-moving update as two halves, one per key) and a sortable order key; the kept rows
   leave the worker as one Arrow IPC stream per owner bucket (`_Bundler`), so the JVM (cache,
   shuffle) moves a few large values instead of a row each. Each task ends
   with its summary (`release.LanePiece` per lane) and the reasons the merger must plan
   the batch instead. The stages are RDDs of (bucket, bytes) pairs, not DataFrames: the JVM
   keeps and shuffles the bundles as opaque bytes, without turning Arrow into its rows and a
   columnar cache and back (a third of the JVM's CPU a W1 row less in the benchmark,
   spark_apply/README.md, "RDD stages").
2. **Bound** (driver, `release.bound`): the lane watermarks and the release mark from the
   summaries; then per lane the last key released and per partition the first held offset
   (`release.Released`) from the tasks' tails (`release.released_by_tails`: the last runs of
   equal ts of each piece), or, when the mark falls before a tail, from one aggregate over
   the cached bundles (`released_by_lane`).
3. **Write** (executors, `write_owned`): the bundles partitioned by owner bucket (the bucket
   modulo the batch's task count, stored in the sink before any task writes:
   `MySQLSink.batch_tasks`);
   each task keeps the rows at or below the mark (`released`), sorts them by (ts, source,
   order key) — the merger's release order restricted to them — and collapses them over
   Arrow (`arrow_collapse`, no Python object per row), or where collapse has more to do
   than the last change per key, from their literal images one by one
   (`changes.collapse_images`; a keyless table or one with another unique key: their events
   through the one collapse, `changes.collapse`)
   and writes them with its marker (job, batch, 0, task) first in one transaction
   (`shard_writes.marked_transaction`).
4. **Commit** (driver, `MySQLSink.commit_owned`): once every task succeeded, the head moves to
   the batch and the state (`release.advance`) is stored, in one transaction.

A batch `release.bound` refuses, whose re-read would exceed `REREAD_LIMIT`, or with a row of a
target the sink does not describe yet (no folds shipped for it), is planned by the merger on
the driver as in snapshot mode (`fallback`), counted in the metrics by reason.
The exactly-once argument is in spark_apply/README.md, "Throughput mode".
"""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pyspark.accumulators import AccumulatorParam

from rowbus.merge.checkpoint import Lane, TopicPartition
from rowbus.merge.positions import Floor, PosKey
from rowbus.protocol.codec import construct
from rowbus.protocol.events import Op, RowChange, TableSchema
from rowbus.routing.routes import Projection, Router, RouteSettings, Target
from rowbus.spark_apply.exceptions import ApplyError, BadEventError
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.literals import SEP, LitImage
from rowbus.spark_apply.ownership import owner
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.release import LanePiece, Tail, key_of, okey_head, okey_tail
from rowbus.spark_apply.rendered import HEADER_FIELDS as _HEADER_FIELDS
from rowbus.spark_apply.settings import SinkConnection

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

    from rowbus.spark_apply.changes import ImageRow, TableChanges

log = logging.getLogger(__name__)

BUNDLE_SCHEMA = (
    "topic STRING, partition INT, offset BIGINT, source STRING, ts BIGINT, okey STRING, "
    "part INT, row STRING"
)
"""A kept row record as the write and release steps read it (`part`: 0 whole, 1 the old key's
delete of a key-moving update, 2 its new key's upsert; `row`: what the write task needs of the
rendered text, `_compact`; `okey`: `release.okey`)."""
WRITE_COLUMNS = tuple(name.split()[0] for name in BUNDLE_SCHEMA.split(","))
Keyed = tuple[int, bytes]
"""An element of `read_and_key`'s RDD: (owner bucket, one Arrow IPC stream of `BUNDLE_SCHEMA`
rows), bucket -1 for rows no route takes (which only the release reads). Rows cross the JVM
(the cache, the shuffle by owner) as a few large values instead of one JVM row each, whose
conversions, cache and shuffle were most of the JVM's CPU per row (spark_apply/README.md,
"Fourth step")."""


class Summaries(AccumulatorParam[list[tuple[int, str]]]):
    """The accumulator of stage 1's (task, summary JSON) pairs: the driver reads them once the
    JVM has materialized the stage (`owned.apply_owned`), so no Python task passes over the
    cached bundles to find them. A task run twice (its stage run again) adds its pair twice,
    the same both times (the read is the one the offsets name): `by_task` keeps one."""

    def zero(self, value: list[tuple[int, str]]) -> list[tuple[int, str]]:
        return []

    def addInPlace(  # noqa: N802 - PySpark's name
        self, value1: list[tuple[int, str]], value2: list[tuple[int, str]]
    ) -> list[tuple[int, str]]:
        value1.extend(value2)
        return value1

    @staticmethod
    def forget(summaries: Accumulator[list[tuple[int, str]]]) -> None:
        """Drops `summaries` from PySpark's registry of the driver's accumulators, which keeps
        every one made for the process's life (here one a batch, holding its summaries); an
        update arriving later (a stage run again) is then ignored."""
        from pyspark.accumulators import _accumulatorRegistry

        _accumulatorRegistry.pop(summaries.aid, None)

    @staticmethod
    def by_task(pairs: list[tuple[int, str]], tasks: int) -> list[str]:
        """One summary per task of `tasks`, in task order; a task without one raises."""
        found = dict(pairs)
        missing = [t for t in range(tasks) if t not in found]
        if missing:
            raise ApplyError(f"stage 1 tasks {missing} of {tasks} reported no summary")
        return [found[t] for t in range(tasks)]


BUCKETS = 128
"""Owner buckets: a key's rows share its owner's bucket, so a bucket's rows go to one write
task (the bucket modulo the task count, `owned._bucket_task`) and ownership is kept; 128
spreads over a handful of tasks within a bucket each."""
WHOLE, OLD_KEY, NEW_KEY = 0, 1, 2
_FLUSH_ROWS = 20_000
"""Rows a keying task holds before it sends them on as bundles (bounds its memory; ~100 rows
a bundle at 128 buckets)."""
REREAD_LIMIT = 200_000
"""Offsets the next batch may read again for held rows; a hold longer than that goes to the
sink's stash through the merger (`fallback`), so the Kafka bytes read per applied row stay
bounded during a long hold."""
_REASONS = 5


@dataclass(frozen=True, slots=True)
class KeyContext:
    """What `read_and_key` needs, shipped to the executors (picklable, a few KB)."""

    schemas: dict[int, TableSchema]
    routes: tuple[RouteSettings, ...]
    unrouted: str
    last_seen: dict[Lane, PosKey]
    floors: dict[str, Floor]
    folds: dict[Target, dict[str, Fold]]
    """Per target the sink describes: how it compares each column (lower case), from
    `MySQLSink.target_folds`; a target not here sends its batch to the driver's path."""
    whole: frozenset[str] = frozenset()
    """Targets (as text) owned whole by one task (`owned.table_owned`): their rows are bucketed
    by the table's owner, the others by their key's."""


class _NotInSinkError(Exception):
    """A row of a target the sink does not describe (no folds shipped for it)."""


def read_and_key(
    ctx: KeyContext,
    kafka: dict[str, Any],
    groups: list[list[ReadRange]],
    summaries: Accumulator[list[tuple[int, str]]],
) -> Callable[[int, Iterator[Any]], Iterator[Keyed]]:
    """The `mapPartitionsWithIndex` function of stage 1 over one partition per task: task i
    reads ``groups[i]`` from Kafka itself (`source.read_range`, the rendered text made
    natively) and keys each record in the same worker, so a row's text enters the JVM once,
    keyed (`Keyed` pairs out); its summary goes to `summaries` (`Summaries`)."""

    def run(task: int, _ids: Iterator[Any]) -> Iterator[Keyed]:
        from rowbus.spark_apply.gc_pause import collector_paused
        from rowbus.spark_apply.source import KafkaRange, read_range

        keyer = _Keyer(ctx)
        bundler = _Bundler()
        with collector_paused():
            for topic, partition, start, end, fresh in groups[task]:
                for cols in read_range(kafka, KafkaRange(topic, partition, start, end)):
                    out = keyer.key(cols, fresh)
                    if out["topic"] and bundler.add(out) >= _FLUSH_ROWS:
                        yield from bundler.flush()
            if bundler.rows:
                yield from bundler.flush()
        summaries.add([(task, keyer.summary())])

    return run


ReadRange = tuple[str, int, int, int, int]
"""(topic, partition, start, end, fresh) a read task reads: ``[start, end)``, the records
below `fresh` (Spark's start) being held rows read again (`PlannerState.reread`)."""


class _Keyer:
    """One read task's keying: the merger's push rules, owners and the lane pieces."""

    def __init__(self, ctx: KeyContext) -> None:
        self.ctx = ctx
        self.names = [*WRITE_COLUMNS, "bucket"]
        self.router = Router(ctx.routes, ctx.unrouted)
        self.projections: dict[int, tuple[Projection, tuple[Fold, ...], str, int] | None] = {}
        self.pieces: dict[Lane, LanePiece] = {}
        self.tails: dict[Lane, Tail] = {}
        self.running: dict[Lane, PosKey] = {}
        self.reasons: list[str] = []
        self.ranges: dict[tuple[str, int], list[int]] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.keys: dict[str, tuple[str, ...]] = {}
        self.heads: dict[tuple[str, str], _Head] = {}
        self.owners: dict[int, tuple[Projection, tuple[Fold, ...], str, int] | None] = {}
        """Per schema id, `projections`' entry, once its first row was owned by its event."""
        self.records = 0
        self.bytes = 0
        """Kafka records and value bytes the task read (held rows read again included)."""

    def key(self, c: dict[str, list[Any]], fresh: int) -> dict[str, list[Any]]:  # noqa: PLR0915 - one pass per record
        """`BUNDLE_SCHEMA`'s columns and the owner bucket of one chunk of `source.read_range`
        (records at or past offset `fresh` are Spark's, the others re-read). A row's header
        is read from its text once, without building its event (`rendered.row_event`: the
        merger's push rules need only its order key, ts and GTID, the owner only its key's
        literals); the first row of a schema id builds it, to find the projection."""
        from rowbus.spark_apply.rendered import row_event

        ctx, pieces, running, reasons = self.ctx, self.pieces, self.running, self.reasons
        out: dict[str, list[Any]] = {n: [] for n in self.names}
        o_topic, o_partition, o_offset, o_source, o_ts, o_okey, o_part, o_row, o_bucket = (
            out[n] for n in self.names
        )
        heads, tails, floors, last_seen = self.heads, self.tails, ctx.floors, ctx.last_seen
        ends, ranges, whole = self.ends, self.ranges, ctx.whole
        self.records += len(c["offset"])
        self.bytes += sum(len(v) for v in c["value"] if v is not None)
        records = (c["topic"], c["partition"], c["offset"], c["kind"], c["source"], c["ts"])
        for topic, partition, offset, kind, source, ts, text in zip(
            *records, c["row"], strict=True
        ):
            tp = (topic, partition)
            if ends.get(tp, -1) <= offset:
                ends[tp] = offset + 1
            if offset >= fresh:
                span = ranges.get(tp)
                if span is None:
                    ranges[tp] = [offset, offset]
                elif offset < span[0]:
                    span[0] = offset
                elif offset > span[1]:
                    span[1] = offset
            if kind in ("resolved", "heartbeat"):
                p = _piece(pieces, topic, partition, source)
                if ts > p.watermark:
                    p.watermark, p.raised_at = ts, offset
                continue
            if text is None:
                reasons.append(f"a {kind} record at {topic}[{partition}]@{offset}")
                continue
            h = text.split(SEP, _HEADER_FIELDS)
            if len(h) <= _HEADER_FIELDS:
                row_event(text, source, ts, self.keys)  # raises, naming what is missing
            file, upstream = h[8], h[11]
            head = heads.get((upstream, file))
            if head is None:
                head = heads[(upstream, file)] = _Head.of(int(upstream), file)
            at, index = int(h[9]), int(h[6])
            key = (head.upstream, head.number, file, at, index)
            lane = (topic, partition, source)
            last = running.get(lane)
            if last is None:
                last = last_seen.get(lane)
            if last is not None and key <= last:
                continue  # a duplicate: the merger drops it too
            running[lane] = key
            floor = floors.get(source)
            if floor is not None and floor.covers_at(key, ts, h[10][1:] or None):
                continue
            p = _piece(pieces, topic, partition, source)
            if p.rows == 0:
                p.first_offset, p.first_key, p.first_ts = offset, key, ts
            elif ts < p.last_ts:
                p.ordered = False
            p.rows += 1
            p.last_key, p.last_ts = key, ts
            k = head.okey(at, index)
            tail = tails.get(lane)
            if tail is None:
                tail = tails[lane] = Tail(topic, partition, source)
            tail.add(ts, offset, k)
            row = _compact_fields(h)
            for target, k_owner, t_owner, part in self._owned(h, text, source, ts, offset, tp):
                o_topic.append(topic)
                o_partition.append(partition)
                o_offset.append(offset)
                o_source.append(source)
                o_ts.append(ts)
                o_okey.append(k)
                o_part.append(part)
                o_row.append(row)
                o_bucket.append(
                    bucket_of(t_owner if target in whole else k_owner) if target else -1
                )
        return out

    def _owned(
        self, h: list[str], text: str, source: str, ts: int, offset: int, tp: TopicPartition
    ) -> list[tuple[str, int, int, int]]:
        """`_owned` of a row from its header fields `h` (`text` split at its first
        `HEADER_FIELDS` separators) and its images' literals."""
        sid = int(h[3])
        if sid not in self.owners:
            from rowbus.spark_apply.rendered import row_event

            at = (*tp, offset)
            try:
                owned = _owned(
                    row_event(text, source, ts, self.keys),
                    at,
                    self.ctx,
                    self.router,
                    self.projections,
                )
            except BadEventError as exc:
                self.reasons.append(str(exc))
                return [("", 0, 0, WHOLE)]
            except _NotInSinkError as exc:
                self.reasons.append(f"a target the sink does not know at {_where(at)} ({exc})")
                return [("", 0, 0, WHOLE)]
            self.owners[sid] = self.projections[sid]
            return owned
        entry = self.owners[sid]
        if entry is None:
            return [("", 0, 0, WHOLE)]
        proj, folds, target, whole = entry
        if proj.keyless:
            return [(target, whole, whole, WHOLE)]
        op, n = h[0], int(h[12])
        literals = h[14].split(SEP)
        key = cast("Callable[[list[str]], tuple[str, ...]]", proj.key)  # literals in, literals out
        if op == _DELETE_NAME:
            return [(target, owner(target, key(literals[:n]), folds), whole, WHOLE)]
        new = key(literals[max(n, 0) :])
        if op == _UPDATE_NAME and n >= 0:
            old = key(literals[:n])
            if old != new:
                return [
                    (target, owner(target, old, folds), whole, OLD_KEY),
                    (target, owner(target, new, folds), whole, NEW_KEY),
                ]
        return [(target, owner(target, new, folds), whole, WHOLE)]

    def summary(self) -> str:
        """The task's summary as JSON (`Summary.of` reads it)."""
        summary = {
            "pieces": [dataclasses.astuple(p) for p in self.pieces.values()],
            "tails": [
                [t.topic, t.partition, t.source, t.before, t.groups] for t in self.tails.values()
            ],
            "reasons": self.reasons[:_REASONS],
            "ranges": [[t, p, lo, hi] for (t, p), (lo, hi) in self.ranges.items()],
            "ends": [[t, p, e] for (t, p), e in self.ends.items()],
            "read": [self.records, self.bytes],
        }
        return json.dumps(summary)


_DELETE_NAME, _UPDATE_NAME = Op.DELETE.value, Op.UPDATE.value


@dataclass(frozen=True, slots=True)
class _Head:
    """What the order keys of one binlog file of one upstream share (`release.okey`'s head)."""

    upstream: int
    number: int
    """The file's number (`BinlogPosition.file_number`)."""
    text: str

    @staticmethod
    def of(upstream: int, file: str) -> _Head:
        number = construct.binlog_position(file, 0, None, upstream).file_number
        return _Head(upstream, number, okey_head(upstream, number, file))

    def okey(self, offset: int, index: int) -> str:
        """`release.okey` of (upstream, number, file, offset, index)."""
        return self.text + okey_tail(offset, index)


def _where(at: tuple[str, int, int]) -> str:
    return "{}[{}]@{}".format(*at)


def bucket_of(owner_hash: int) -> int:
    """The owner bucket of an owner hash (`ownership.owner`), in ``[0, BUCKETS)``."""
    return owner_hash % BUCKETS


class _Bundler:
    """A keying task's kept rows, sent on as one Arrow IPC stream per owner bucket."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.rows = 0

    def add(self, cols: dict[str, list[Any]]) -> int:
        """Holds one chunk (`BUNDLE_SCHEMA`'s columns and "bucket"); returns the rows held."""
        import pyarrow as pa

        self.chunks.append(pa.RecordBatch.from_pydict(cols, schema=_BUCKETED()))
        self.rows += len(cols["bucket"])
        return self.rows

    def flush(self) -> list[Keyed]:
        """The held rows as one `Keyed` pair per bucket (rows in their read order)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.Table.from_batches(self.chunks).combine_chunks()
        self.chunks, self.rows = [], 0
        # A stable sort: within a bucket the rows keep their read order.
        ordered = table.take(pc.sort_indices(table, [("bucket", "ascending")]))
        counts = pc.value_counts(ordered.column("bucket")).to_pylist()
        rows = ordered.drop_columns(["bucket"])
        out: list[Keyed] = []
        at = 0
        for entry in counts:
            n = entry["counts"]
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as writer:
                writer.write_table(rows.slice(at, n))
            out.append((entry["values"], sink.getvalue().to_pybytes()))
            at += n
        return out


def _BUCKETED() -> Any:  # noqa: N802 - a schema, built where pyarrow is imported
    import pyarrow as pa

    schema = _arrow(BUNDLE_SCHEMA)
    return schema.append(pa.field("bucket", pa.int32()))


def unbundled(pairs: Iterable[Keyed]) -> Iterator[Any]:
    """The `BUNDLE_SCHEMA` record batches of `Keyed` bundles."""
    import pyarrow as pa

    for _bucket, blob in pairs:
        yield from pa.ipc.open_stream(blob)


def _piece(pieces: dict[Lane, LanePiece], topic: str, partition: int, source: str) -> LanePiece:
    lane = (topic, partition, source)
    p = pieces.get(lane)
    if p is None:
        p = pieces[lane] = LanePiece(topic, partition, source)
    return p


def _owned(
    ev: RowChange,
    at: tuple[str, int, int],
    ctx: KeyContext,
    router: Router,
    projections: dict[int, tuple[Projection, tuple[Fold, ...], str, int] | None],
) -> list[tuple[str, int, int, int]]:
    """(target, key owner, table owner, part) of a row at `at` (topic, partition, offset):
    one entry, or two for an update that moves its key (the old key's delete and the new
    key's upsert, each with its key's owner); target "" for a row no route takes."""
    if ev.schema_id not in projections:
        projections[ev.schema_id] = _projection(ev, at, ctx, router)
    entry = projections[ev.schema_id]
    if entry is None:
        return [("", 0, 0, WHOLE)]
    proj, folds, target, whole = entry
    if proj.keyless:
        return [(target, whole, whole, WHOLE)]
    if ev.op is Op.DELETE:
        assert ev.before is not None
        return [(target, owner(target, _text(proj.key(ev.before)), folds), whole, WHOLE)]
    assert ev.after is not None
    new = _text(proj.key(ev.after))
    if ev.op is Op.UPDATE and ev.before is not None:
        old = _text(proj.key(ev.before))
        if old != new:
            return [
                (target, owner(target, old, folds), whole, OLD_KEY),
                (target, owner(target, new, folds), whole, NEW_KEY),
            ]
    return [(target, owner(target, new, folds), whole, WHOLE)]


def _projection(
    ev: RowChange, at: tuple[str, int, int], ctx: KeyContext, router: Router
) -> tuple[Projection, tuple[Fold, ...], str, int] | None:
    """What `_owned` keeps per schema id: the projection, its key columns' folds, the target
    as text and the whole table's owner (None: no route takes the table)."""
    from rowbus.spark_apply.changes import project

    where = "{}[{}]@{}".format(*at)
    if ev.schema_id not in ctx.schemas:
        raise BadEventError(f"schema id {ev.schema_id} not shipped", where)
    found = project(Envelope(*at, ev), router, ctx.schemas.get)
    if found is None:
        return None
    columns = ctx.folds.get(found.target)
    if columns is None:
        raise _NotInSinkError(str(found.target))
    folds = tuple(columns.get(c.lower(), Fold.TEXT) for c in found.key_columns)
    target = str(found.target)
    return found, folds, target, owner(target, ())


def _text(key: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(str(k) for k in key)


_ARROW_TYPES = {"STRING": "string", "INT": "int32", "BIGINT": "int64", "BINARY": "binary"}


def _arrow(ddl: str) -> Any:
    """A pyarrow schema of a ``name TYPE, …`` text (on an executor, without a Spark session)."""
    import pyarrow as pa

    fields = [part.split() for part in ddl.split(",")]
    return pa.schema([(name, getattr(pa, _ARROW_TYPES[kind])()) for name, kind in fields])


# -- stage 2: the owned writes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteContext:
    """What `write_owned` needs, shipped to the executors."""

    sink: SinkConnection
    state_db: str
    """The quoted state database."""
    job: str
    batch_id: int
    offsets: str
    """The batch's offsets JSON (every marker of the batch carries it)."""
    watermark: int
    mark: int
    """The release mark (`release.Bound.mark`): a bundle's rows with a later ts stay held."""
    schemas: dict[int, TableSchema]
    routes: tuple[RouteSettings, ...]
    unrouted: str
    unique_keys: dict[Target, tuple[tuple[str, ...], ...]]
    generated: dict[Target, frozenset[str]]
    statement_bytes: int
    folds: dict[Target, dict[str, Fold]]
    """The sink's column folds per target (`KeyContext.folds`): collapse's, as the driver's."""


def write_owned(ctx: WriteContext) -> Callable[[int, Iterator[Keyed]], Iterator[Any]]:
    """The `mapPartitionsWithIndex` function of stage 2 over the bundles of the buckets task
    `task` owns (every row of their keys): the released rows (ts ≤ the mark), collapsed and
    written with its marker; yields (task, rows written)."""

    def run(task: int, pairs: Iterator[Keyed]) -> Iterator[Any]:
        from rowbus.spark_apply.gc_pause import collector_paused
        from rowbus.spark_apply.shard_writes import marked_transaction

        with collector_paused():
            kept = list(released(unbundled(pairs), ctx.mark))
            if not sum(b.num_rows for b in kept):
                return
            writes = _TaskWrites(kept, ctx)
            written = marked_transaction(
                ctx.sink,
                ctx.state_db,
                ctx.job,
                task,
                (ctx.batch_id, 0, ctx.offsets, ctx.watermark, None),
                writes.write,
            )
            # Freed before the collector's pass at the block's end, which would otherwise
            # traverse every row and image still held (~1.9 µs a W1 row, measured in process).
            writes.clear()
        yield task, written

    return run


class _TaskWrites:
    """A write task's released rows and how they are written: collapsed over Arrow
    (`arrow_collapse`) where that is the whole of the collapse, else one by one
    (`_collapsed`), which also takes over when the sink refuses the Arrow path's upsert as
    truncated (the ENUM error value)."""

    def __init__(self, kept: list[Any], ctx: WriteContext) -> None:
        from rowbus.spark_apply.arrow_collapse import collapsed

        self.kept, self.ctx = kept, ctx
        self.router = Router(ctx.routes, ctx.unrouted)
        self.bulks = collapsed(
            kept,
            ctx.schemas.get,
            self.router,
            lambda t: ctx.unique_keys.get(t, ()),
            lambda t: ctx.generated.get(t, frozenset()),
            lambda t: ctx.folds.get(t, {}),
        )
        self.tables: dict[Target, TableChanges] | None = None

    def write(self, cur: Any) -> int:
        """The rows written on `cur` (in the task's marked transaction; run again after a
        deadlock)."""
        from rowbus.spark_apply.arrow_collapse import write_bulks

        if self.bulks is not None:
            written = write_bulks(cur, self.bulks, self.ctx.statement_bytes)
            if written is not None:
                return written
        if self.tables is None:
            rows = sorted(_rows(self.kept), key=_RELEASE_ORDER)
            self.tables = _collapsed(rows, self.router, self.ctx)
        return _write(cur, self.tables, self.ctx)

    def clear(self) -> None:
        self.kept, self.bulks, self.tables = [], None, None


def released(batches: Iterable[Any], mark: int) -> Iterator[Any]:
    """The rows of `BUNDLE_SCHEMA` batches with ts ≤ `mark`."""
    import pyarrow.compute as pc

    for batch in batches:
        kept = batch.filter(pc.less_equal(batch.column(batch.schema.names.index("ts")), mark))
        if kept.num_rows:
            yield kept


def released_by_lane(mark: int) -> Callable[[Iterator[Keyed]], Iterator[LaneRelease]]:
    """The `mapPartitions` function of the release aggregate (`owned._released`, a mark before
    a piece's tail): per bundle's lane the last order key and highest ts at or below `mark`
    and the first offset above it (a `LaneRelease` row), for the driver to reduce per lane."""

    def run(pairs: Iterator[Keyed]) -> Iterator[LaneRelease]:
        out: dict[Lane, list[Any]] = {}
        for batch in unbundled(pairs):
            cols = [batch.column(batch.schema.names.index(n)).to_pylist() for n in _LANE_COLUMNS]
            for topic, partition, source, offset, ts, k in zip(*cols, strict=True):
                agg = out.setdefault((topic, partition, source), [None, None, None])
                if ts <= mark:
                    agg[0] = k if agg[0] is None or k > agg[0] else agg[0]
                    agg[1] = ts if agg[1] is None or ts > agg[1] else agg[1]
                elif agg[2] is None or offset < agg[2]:
                    agg[2] = offset
        for (topic, partition, source), (last, top, held) in out.items():
            yield topic, partition, source, last, top, held

    return run


_LANE_COLUMNS = ("topic", "partition", "source", "offset", "ts", "okey")
LaneRelease = tuple[str, int, str, str | None, int | None, int | None]
"""`released_by_lane`'s row: (topic, partition, source, last order key and highest ts at or
below the mark, first offset above it)."""


def _compact(text: str) -> str:
    """What a write task needs of a rendered row's text (`rendered.rendered_row`): its op,
    schema id, before-image length and images, without the rest of the header (transaction,
    binlog position, names, key columns: a third of a W1 row's text, which would cross the
    JVM through the cache and the shuffle and be parsed again for nothing)."""
    h = text.split(SEP, _HEADER_FIELDS)
    return _compact_fields(h) if len(h) > _HEADER_FIELDS else ""


def _compact_fields(h: list[str]) -> str:
    """`_compact` of a text split at its first `HEADER_FIELDS` separators."""
    return f"{h[0]}{SEP}{h[3]}{SEP}{h[12]}{SEP}{h[14]}"


_SHIPPED_TXN = construct.txn_ref("", 0, None)
_SHIPPED_AT = construct.binlog_position("(not shipped to write tasks)", 0, None)
"""The transaction and binlog position of a write task's events (`_compact` leaves them out):
its envelopes name the record by topic, partition and offset."""
_OPS = {op.value: op for op in Op}


Row = tuple[int, str, str, int, str, str, int, int]
"""A write task's row: (ts, source, order key, part, text, topic, partition, offset), the
first four its release order (`_RELEASE_ORDER`), `text` `_compact`'s."""
_RELEASE_ORDER = operator.itemgetter(0, 1, 2, 3)
"""The merger's release order restricted to a task's rows (a stable sort keeps the read order
of equal ones, as sorting the events by it did)."""


def _rows(batches: Iterable[Any]) -> Iterator[Row]:
    """The `Row`s of `BUNDLE_SCHEMA` batches."""
    for batch in batches:
        names = batch.schema.names
        topics, partitions, offsets, sources, tss, okeys, parts, texts = (
            batch.column(names.index(n)).to_pylist() for n in WRITE_COLUMNS
        )
        yield from zip(tss, sources, okeys, parts, texts, topics, partitions, offsets, strict=True)


def _collapsed(rows: list[Row], router: Router, ctx: WriteContext) -> dict[Target, TableChanges]:
    """The task's rows collapsed per target: from their literal images without an event per
    row (`changes.collapse_images`), or, when a table needs the events (keyless, another
    unique key), by `changes.collapse` over them."""
    from rowbus.spark_apply.changes import collapse, collapse_images
    from rowbus.spark_apply.shard_writes import SHIPPED

    unique_keys = lambda t: ctx.unique_keys.get(t, ())  # noqa: E731 - collapse's lookups
    generated = lambda t: ctx.generated.get(t, frozenset())  # noqa: E731
    folds = lambda t: ctx.folds.get(t, {})  # noqa: E731
    images = [_images(r[4], r[3]) for r in rows]
    tables = collapse_images(
        images,
        lambda i: _envelope(rows[i], ctx.schemas),
        SHIPPED,
        router,
        ctx.schemas.get,
        unique_keys,
        generated,
        folds,
    )
    if tables is not None:
        return tables
    envelopes = [_envelope(r, ctx.schemas) for r in rows]
    shards = collapse(
        envelopes, router, ctx.schemas.get, lambda t, k: 0, unique_keys, generated, folds
    )
    return shards.get(0, {})


_DELETE, _INSERT = Op.DELETE, Op.INSERT


def _images(text: str, part: int) -> ImageRow:
    """(op, schema id, before, after) of `_compact`'s text, cut to its half for a key-moving
    update (`part`)."""
    fields = text.split(SEP)
    op, n = _OPS[fields[0]], int(fields[2])
    before = fields[3 : 3 + n] if n >= 0 else None
    after = fields[3 + max(n, 0) :] if op is not _DELETE else None
    if part == OLD_KEY:
        op, after = _DELETE, None
    elif part == NEW_KEY:
        op, before = _INSERT, None
    return op, int(fields[1]), before, after


def _envelope(row: Row, schemas: dict[int, TableSchema]) -> Envelope:
    """The envelope of a `Row`: its event with the images as `LitImage`s."""
    ts, source, _okey, part, text, topic, partition, offset = row
    op, sid, before, after = _images(text, part)
    table = schemas[sid]
    ev = construct.row_change(
        source,
        ts,
        op,
        table.schema,
        table.table,
        sid,
        table.primary_key,
        None if before is None else LitImage(before),
        None if after is None else LitImage(after),
        _SHIPPED_TXN,
        _SHIPPED_AT,
    )
    return Envelope(topic, partition, offset, ev)


def _write(cur: Any, tables: dict[Target, TableChanges], ctx: WriteContext) -> int:
    from rowbus.spark_apply.table_writes import write_table

    for tc in tables.values():
        write_table(cur, tc, ctx.statement_bytes)
    return sum(len(t) for t in tables.values())


# -- the driver's side ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """Stage 1's report, merged over its tasks."""

    pieces: tuple[LanePiece, ...]
    tails: tuple[Tail, ...]
    """The last rows of each piece with rows (`release.released_by_tails`)."""
    reasons: tuple[str, ...]
    ranges: dict[TopicPartition, tuple[int, int]]
    """(first, last) offset per partition of the records Spark's batch names (not re-read)."""
    ends: dict[TopicPartition, int]
    records: int
    bytes: int
    """Kafka records and value bytes stage 1 read (`metrics.ApplyMetrics.bytes_in`)."""

    @staticmethod
    def of(texts: Iterable[str]) -> Summary:
        pieces: list[LanePiece] = []
        tails: list[Tail] = []
        reasons: list[str] = []
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        ends: dict[TopicPartition, int] = {}
        records = size = 0
        for text in texts:
            data = json.loads(text)
            records += data["read"][0]
            size += data["read"][1]
            for fields in data["pieces"]:
                t, p, s, wm, at, n, first, fk, lk, fts, lts, ordered = fields
                pieces.append(
                    LanePiece(
                        t,
                        p,
                        s,
                        wm,
                        at,
                        n,
                        first,
                        _key(fk),
                        _key(lk),
                        fts,
                        lts,
                        ordered,
                    )
                )
            for t, p, s, before, groups in data["tails"]:
                tails.append(Tail(t, p, s, groups, None if before is None else tuple(before)))
            reasons.extend(data["reasons"])
            for t, p, lo, hi in data["ranges"]:
                old = ranges.get((t, p), (lo, hi))
                ranges[(t, p)] = (min(old[0], lo), max(old[1], hi))
            for t, p, e in data["ends"]:
                ends[(t, p)] = max(ends.get((t, p), 0), e)
        return Summary(tuple(pieces), tuple(tails), tuple(reasons), ranges, ends, records, size)


def _key(items: list[Any] | None) -> PosKey | None:
    if items is None:
        return None
    upstream, number, file, offset, index = items
    return (int(upstream), int(number), str(file), int(offset), int(index))


def released_of(rows: Iterable[LaneRelease]) -> dict[Lane, tuple[PosKey, int]]:
    """Per lane (last order key, highest ts) released, from the aggregate's rows reduced per
    lane (`owned._released`)."""
    return {
        (topic, partition, source): (key_of(last), int(top))
        for topic, partition, source, last, top, _held in rows
        if last is not None and top is not None
    }


def elapsed(since: float) -> float:
    return time.perf_counter() - since
