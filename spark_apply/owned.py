"""Throughput mode's driver: one batch in four Spark-side steps, none of them per row here.

`apply_owned(applier, df, batch_id)` runs the steps `rowbus.spark_apply.throughput` describes
(key on the executors, bound from summaries, write by owner, commit the head) or, for a batch
the merger must plan (`release.bound` gives a reason), hands the batch with its re-read
records to the driver's path of snapshot mode (`BatchApplier.plan_on_driver`). What the driver
touches grows with lanes (summaries, aggregates), tasks (results) and tables (schemas, key
lookups), never with rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rowbus.merge.checkpoint import TopicPartition
from rowbus.routing.routes import Target
from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.overlap import logged_offsets
from rowbus.spark_apply.planner import Envelope, PlannerState
from rowbus.spark_apply.release import (
    Bound,
    Released,
    advance,
    bound,
    released_by_tails,
    reread_span,
)
from rowbus.spark_apply.rendered import Wire
from rowbus.spark_apply.throughput import (
    REREAD_LIMIT,
    KeyContext,
    LaneRelease,
    ReadRange,
    Summaries,
    Summary,
    WriteContext,
    read_and_key,
    released_by_lane,
    released_of,
    write_owned,
)

if TYPE_CHECKING:
    from rowbus.spark_apply.job import BatchApplier
    from rowbus.spark_apply.metrics import ApplyMetrics

log = logging.getLogger(__name__)


def apply_owned(applier: BatchApplier, df: Any, batch_id: int) -> None:  # noqa: PLR0915 - the steps in order
    """Apply micro-batch `batch_id` in throughput mode (see the module docstring)."""
    from pyspark import StorageLevel

    started = time.perf_counter()
    a, sink = applier.config.apply, applier.mysql_sink
    previous = sink.previous_state(batch_id)
    if previous is None:
        sink.check_offsets(batch_id, _spark_ranges(df), None)
        log.info("batch %d is already committed in the sink; skipped", batch_id)
        return
    # A batch in flight (a driver before this one was killed mid-batch) is finished the way
    # it began: by write tasks if it stored a task count (their markers would collide with
    # the driver path's), by the driver's path if the head is part-way through it.
    head = sink.head()
    if head is not None and head.batch_id == batch_id and not head.complete:
        applier.metrics.fallbacks["a batch the driver's path began"] += 1
        log.info("batch %d: finished by the driver's path, which began it", batch_id)
        _fallback(applier, df, batch_id, started)
        return
    in_flight = sink.stored_tasks(batch_id)
    if in_flight is not None:
        # Its first attempt's tasks knew the schemas that driver had learnt; this driver may
        # know none yet, and the batch must not go to the driver's path for that.
        applier.catalog.catch_up()
    folds = _folds(applier)
    keys = _target_keys(applier)
    ctx = KeyContext(
        applier.catalog.known(),
        a.routes,
        a.unrouted,
        previous.last_seen,
        previous.floors,
        folds,
        frozenset(keys.whole),
    )
    spark = df.sparkSession
    reads = _read_ranges(applier, batch_id, previous, spark.sparkContext.defaultParallelism)
    if isinstance(reads, str):
        _refuse_in_flight(batch_id, in_flight, reads)
        applier.metrics.fallbacks[reads] += 1
        log.info("batch %d: planned by the merger on the driver (%s)", batch_id, reads)
        _fallback(applier, df, batch_id, started)
        return
    sc = spark.sparkContext
    summaries = sc.accumulator([], Summaries())
    keyed = (
        sc.parallelize(range(len(reads)), len(reads))
        .mapPartitionsWithIndex(read_and_key(ctx, applier.config.kafka, reads, summaries))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        # Materialized by the JVM's own count of the cached RDD: a Python action would pass
        # every cached bundle through a Python worker again (~0.1 s a 200k batch) for
        # summaries the tasks already handed in through the accumulator.
        try:
            keyed._jrdd.count()
            found = summaries.value
        finally:
            Summaries.forget(summaries)
        summary = Summary.of(Summaries.by_task(found, len(reads)))
        applier.metrics.records_in += summary.records
        applier.metrics.bytes_in += summary.bytes
        keyed_at = time.perf_counter()
        sink.check_offsets(batch_id, summary.ranges, previous)
        expected = applier.expected(summary.ends)
        reason = summary.reasons[0] if summary.reasons else None
        if reason is None and applier.shard_ddl is not None:
            reason = "shard DDL coordination"
        if reason is None and sink.seen.running:
            # the seen keys of a running snapshot (PROTOCOL.md §9.7) are written by the
            # driver's path only
            reason = "a snapshot is running"
        b: Bound | str | None = None if reason else bound(previous, summary.pieces, expected)
        if isinstance(b, str):
            reason, b = b, None
        state: PlannerState | None = None
        if b is not None:
            # The tails answer in the usual case; a mark before one asks the cached bundles.
            released = released_by_tails(summary.tails, b.mark, summary.ends)
            state = advance(previous, b, released or _released(keyed, b, summary))
            if reread_span(state) > REREAD_LIMIT:
                reason = f"held rows span {reread_span(state)} offsets (> {REREAD_LIMIT})"
        bounded_at = time.perf_counter()
        if reason is not None or state is None or b is None:
            _refuse_in_flight(batch_id, in_flight, reason)
            applier.metrics.fallbacks[(reason or "").split(" at ")[0][:60]] += 1
            log.info("batch %d: planned by the merger on the driver (%s)", batch_id, reason)
            _fallback(applier, df, batch_id, started)
            return
        tasks = sink.batch_tasks(batch_id, a.parallelism)
        wctx = _write_context(applier, batch_id, state, b.mark, folds, keys)
        results = (
            # Bucket -1 holds the rows no route takes; each bucket's bundles go to one task
            # (the bucket modulo the task count), which writes their rows at or below the mark.
            keyed.filter(_is_routed)
            .partitionBy(tasks, _bucket_task)
            .mapPartitionsWithIndex(write_owned(wctx))
            .collect()
        )
        written = sum(int(n) for _task, n in results)
        wrote_at = time.perf_counter()
        sink.commit_owned(batch_id, state, written)
    finally:
        keyed.unpersist()
    m = applier.metrics
    m.owned_batches += 1
    m.batches += 1
    m.rows_applied += written
    m.watermark_ts = max(m.watermark_ts, state.released_through)
    m.stash_events = 0
    m.apply_latency.observe(time.perf_counter() - wrote_at)
    log.info(
        "batch %d: %d rows written by %d task(s) of %d, watermark %d, re-read next %d offsets; "
        "key %.3fs bound %.3fs write %.3fs commit %.3fs",
        batch_id,
        written,
        len(results),
        tasks,
        state.released_through,
        reread_span(state),
        keyed_at - started,
        bounded_at - keyed_at,
        wrote_at - bounded_at,
        time.perf_counter() - wrote_at,
    )


def _refuse_in_flight(batch_id: int, in_flight: int | None, reason: str | None) -> None:
    """A batch begun by write tasks must not be finished by the driver's path."""
    if in_flight is not None:
        raise ApplyError(
            f"batch {batch_id} was begun by {in_flight} write task(s) of an earlier driver "
            f"but would now be planned by the driver's path ({reason}): stopped rather "
            "than write it twice; its records or this driver's view of the sink changed"
        )


def _read_ranges(
    applier: BatchApplier, batch_id: int, previous: PlannerState, tasks: int
) -> list[list[ReadRange]] | str:
    """What each stage-1 task reads (`read_plan`) of Spark's ranges of the batch, taken from
    its offset log (the batch before's end to this one's), or the reason the driver's path
    must read the batch. A held offset below its partition's log start stops the job
    (`_check_retained`)."""
    location = applier.config.apply.checkpoint_location
    ends = logged_offsets(location, batch_id)
    starts = logged_offsets(location, batch_id - 1) if batch_id > 0 else None
    if ends is None or starts is None:
        return "no start in Spark's offset log"
    plan = read_plan(starts, ends, previous, tasks)
    if isinstance(plan, str):
        return plan
    groups, again = plan
    if again:
        _check_retained(applier.config.kafka, again)
    return groups


def read_plan(
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    previous: PlannerState,
    tasks: int,
) -> tuple[list[list[ReadRange]], list[tuple[str, int, int, int]]] | str:
    """(what each stage-1 task reads, the held ranges read again) of a batch whose Spark
    ranges are ``[starts, ends)``: the held rows (``previous.reread`` up to
    ``previous.offsets``) and Spark's records of a partition as one read where they meet
    (always, unless Spark's checkpoint and the sink disagree, which `check_offsets` then
    refuses), grouped as the source groups its reads (`source.group_ranges`); or the reason
    the driver's path must read it (a partition Spark has no start for)."""
    from rowbus.spark_apply.source import KafkaRange, group_ranges

    if not ends.keys() <= starts.keys():
        return "a partition new to Spark's offsets"
    ranges: list[KafkaRange] = []
    again: list[tuple[str, int, int, int]] = []
    for (t, p), end in sorted(ends.items()):
        fresh = start = starts[(t, p)]
        held, until = previous.reread.get((t, p)), previous.offsets.get((t, p), fresh)
        if held is not None and held < until:
            again.append((t, p, held, until))
            if until == fresh:
                start = held
            else:
                ranges.append(KafkaRange(t, p, held, until))
        if end > start:
            ranges.append(KafkaRange(t, p, start, end))
    groups = [
        [(r.topic, r.partition, r.start, r.end, starts[(r.topic, r.partition)]) for r in g.ranges]
        for g in group_ranges(ranges, tasks)
    ]
    return groups or [[]], again


def _released(rows: Any, b: Bound, summary: Summary) -> Released:
    """One aggregate over the cached keyed rows: per lane the last key and the highest ts
    released, and the first held offset (each task's bundles reduced in Python,
    `throughput.released_by_lane`, then per lane here: a row per task and lane)."""
    lanes: dict[tuple[str, int, str], LaneRelease] = {}
    for got in rows.mapPartitions(released_by_lane(b.mark)).collect():
        was = lanes.get(got[:3])
        lanes[got[:3]] = got if was is None else (
            *got[:3], _pick(max, got[3], was[3]), _pick(max, got[4], was[4]),
            _pick(min, got[5], was[5]),
        )  # fmt: skip
    first_held: dict[tuple[str, int], int] = {}
    for topic, partition, _source, _last, _top, held in lanes.values():
        if held is not None:
            tp = (topic, partition)
            first_held[tp] = min(first_held.get(tp, held), int(held))
    return Released(released_of(lanes.values()), first_held, summary.ends)


def _pick(f: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """`f` of two values of which either may be None (none: the other)."""
    return b if a is None else a if b is None else f(a, b)


def _is_routed(pair: tuple[int, bytes]) -> bool:
    return pair[0] >= 0


def _bucket_task(bucket: int) -> int:
    """`partitionBy`'s function: Spark takes it modulo the task count, so bucket b goes to
    task b % tasks in every attempt and replay (Python's hash of an int is not salted)."""
    return bucket


def _folds(applier: BatchApplier) -> dict[Target, dict[str, Fold]]:
    """The sink's column folds of every target the catalog's tables route to and the sink
    describes (`MySQLSink.target_folds`, cached there until its next DDL); a target left out
    sends a batch with rows of it to the driver's path (`throughput.read_and_key`)."""
    out: dict[Target, dict[str, Fold]] = {}
    for table in applier.catalog.known().values():
        proj = applier.router.projection(table)
        if proj is None or proj.target in out:
            continue
        found = applier.mysql_sink.target_folds(proj.target)
        if found is not None:
            out[proj.target] = found
    return out


@dataclass(frozen=True, slots=True)
class _TargetKeys:
    """The sink's unique keys and generated columns per target, and the targets owned whole by
    one task: those with a unique key besides the one rows are collapsed by (a conflict group
    of `causality` may join any two of their rows, so a key's owner is not enough), and those
    without a key."""

    unique: dict[Any, tuple[tuple[str, ...], ...]]
    generated: dict[Any, frozenset[str]]
    whole: set[str]


def _target_keys(applier: BatchApplier) -> _TargetKeys:
    out = _TargetKeys({}, {}, set())
    for table in applier.catalog.known().values():
        proj = applier.router.projection(table)
        if proj is None:
            continue
        keys, gen = applier.mysql_sink.target_keys(proj.target)
        out.unique[proj.target], out.generated[proj.target] = keys, gen
        mine = {c.lower() for c in proj.key_columns}
        if any({c.lower() for c in k} != mine for k in keys):
            out.whole.add(f"{proj.target.schema}.{proj.target.table}")
    return out


def _write_context(
    applier: BatchApplier,
    batch_id: int,
    state: PlannerState,
    mark: int,
    folds: dict[Target, dict[str, Fold]],
    keys: _TargetKeys,
) -> WriteContext:
    """The write tasks' context (the sink's keys as the keying tasks saw them)."""
    a, sink = applier.config.apply, applier.mysql_sink
    return WriteContext(
        sink.settings,
        sink.state_db,
        a.job,
        batch_id,
        json.dumps(sorted([*k, v] for k, v in state.offsets.items())),
        state.released_through,
        mark,
        applier.catalog.known(),
        a.routes,
        a.unrouted,
        keys.unique,
        keys.generated,
        sink.statement_bytes,
        folds,
    )


def held_rows(
    spark: Any, kafka: dict[str, Any], wire: Wire | None, metrics: ApplyMetrics
) -> Callable[[PlannerState], list[Envelope]]:
    """The driver's path's read of the rows a throughput batch left held in Kafka
    (`PlannerState.reread`; `BatchApplier._plan_and_write` calls it when the state names any):
    their records read again by executor tasks, as envelopes (rendered into `wire`, or decoded
    when None). A held offset below its partition's log start stops the job: those rows are
    gone."""

    def held(previous: PlannerState) -> list[Envelope]:
        from rowbus.spark_apply.job import envelopes_of

        again = _reread(spark, kafka, previous)
        if again is None:
            return []
        table = again.toArrow()
        metrics.read(table)
        return envelopes_of(table, wire)

    return held


def _reread(spark: Any, kafka: dict[str, Any], previous: PlannerState) -> Any:
    """The held rows' records as a DataFrame of `source.SCHEMA` (None: nothing held)."""
    from rowbus.spark_apply.source import SCHEMA, KafkaRange, read_range

    ranges = [
        (t, p, start, previous.offsets[(t, p)])
        for (t, p), start in sorted(previous.reread.items())
        if start < previous.offsets.get((t, p), start)
    ]
    if not ranges:
        return None
    _check_retained(kafka, ranges)

    def read(batches: Any) -> Any:
        import pyarrow as pa

        from rowbus.spark_apply.source import arrow_schema

        for batch in batches:
            for t, p, start, end in zip(
                *(batch.column(i).to_pylist() for i in range(4)), strict=True
            ):
                for cols in read_range(kafka, KafkaRange(t, p, start, end)):
                    yield pa.RecordBatch.from_pydict(cols, schema=arrow_schema())

    frame = spark.createDataFrame(ranges, "topic STRING, partition INT, start BIGINT, end BIGINT")
    return frame.repartition(len(ranges)).mapInArrow(read, SCHEMA)


def _check_retained(kafka: dict[str, Any], ranges: list[tuple[str, int, int, int]]) -> None:
    from confluent_kafka import TopicPartition

    from rowbus.spark_apply.source import _consumer

    consumer = _consumer(kafka)
    try:
        for t, p, start, _end in ranges:
            low, _high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            if start < low:
                raise ApplyError(
                    f"held rows at {t}[{p}]@{start} are below the partition's log start {low} "
                    "(retention removed them): they cannot be applied; apply again from an "
                    "earlier copy of the topic or under a new apply.job"
                )
    finally:
        consumer.close()


def _spark_ranges(df: Any) -> dict[tuple[str, int], tuple[int, int]]:
    from pyspark.sql import functions as sf

    rows = df.groupBy("topic", "partition").agg(sf.min("offset"), sf.max("offset")).collect()
    return {(r[0], int(r[1])): (int(r[2]), int(r[3])) for r in rows}


def _fallback(applier: BatchApplier, df: Any, batch_id: int, started: float) -> None:
    """The batch, with its re-read records (`held_rows`), planned by the merger and written by
    the driver (as snapshot mode does), before the next batch starts."""
    applier.plan_on_driver(df, batch_id, started)
    applier.drain()
