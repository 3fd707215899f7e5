"""The apply job: a Structured Streaming query whose foreachBatch plans and applies on the
driver.

Spark reads on the executors (the Kafka source decodes every record there and renders each
row's SQL literals, `rendered`); each micro-batch is collected to the driver as Arrow, turned
into `Envelope`s (rows with literal images, no value decoded), planned over the state the sink
holds for the previous batch, and applied with the checkpoint in the same transaction(s). A
batch Spark re-runs after a crash has the same id and offsets, so it plans the same thing and
is skipped or resumed by the sink.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rowbus.clients.prometheus import Exporter
from rowbus.protocol.codec import ENCODING_HEADER, decode
from rowbus.protocol.events import BinlogPosition, DdlChange, Heartbeat, Resolved, TableSchema
from rowbus.protocol.topics import data_topic
from rowbus.routing.routes import Router
from rowbus.spark_apply.boundaries import BOUNDARIES_FILE
from rowbus.spark_apply.catalog import SchemaCatalog
from rowbus.spark_apply.exceptions import (
    ApplyError,
    BatchFailure,
    CheckpointConflictError,
    MissingTopicError,
    SinkUnavailableError,
)
from rowbus.spark_apply.gc_pause import collector_paused
from rowbus.spark_apply.metrics import ApplyMetrics
from rowbus.spark_apply.overlap import BatchWriter, has_batches, rewind, seed
from rowbus.spark_apply.planner import Envelope, PairKey, Plan, PlannerState, plan, stored_gate
from rowbus.spark_apply.recovery import retryable, wait_for_sink
from rowbus.spark_apply.rendered import ROW_COLUMN, Wire, row_event
from rowbus.spark_apply.settings import JobConfig, launched_by_spark_submit
from rowbus.spark_apply.shard_ddl import ShardDdlHook
from rowbus.spark_apply.shard_writes import ShardWrite, write_shard
from rowbus.spark_apply.sink import MySQLSink
from rowbus.spark_apply.sinks import Sink
from rowbus.spark_apply.stall import StallReporter

log = logging.getLogger(__name__)
trace_log = logging.getLogger(f"{__name__}.trace")
"""A failed batch's whole Python trace (`BatchApplier.__call__`); the job's command silences
it unless asked for traces (-v)."""


def _not_a_stop(record: logging.LogRecord) -> bool:
    """False for py4j's whole-trace report of a batch the query's stop interrupted (the job
    logs that in one line): a stopped job printed ~20 lines of it."""
    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, BatchFailure) and exc.interrupted)


logging.getLogger("py4j.clientserver").addFilter(_not_a_stop)

STASH_MEMORY_EVENTS = 20_000
"""Held events the planner keeps in the driver's memory while it plans a batch, at least
(the batch's own records, when more: `_memory_limit`); the rest are in the batch's spill file
and, once it commits, in the sink's pieces."""


def _memory_limit(records: int) -> int:
    """The planner's in-memory limit for a batch of `records` decoded records.

    The batch's events are in memory while it is planned anyway (the decoded envelopes the
    merger is pushed): spilling them during planning freed nothing, and since the merger
    holds everything until every lane's watermark is pushed, a batch above the limit spilled
    its overflow run by run — for single-row transactions one chunk per event, written,
    read back with a seek each and decoded a second time (measured in the W2 lag run: 16 s of
    the driver's 95 s). A function of the batch's records, so a replay spills the same."""
    return max(STASH_MEMORY_EVENTS, records)


class BatchApplier:
    """The foreachBatch function. Lifecycle: `start()` connects the sink; `close()`."""

    def __init__(self, config: JobConfig, shard_ddl: ShardDdlHook | None = None) -> None:
        self.config = config
        self.shard_ddl = shard_ddl
        a = config.apply
        self.topics = {data_topic(a.topic_template, s): s for s in config.sources}
        self.catalog = SchemaCatalog(config.kafka, a.schemas_topic)
        self.router = Router(a.routes, a.unrouted)
        self.sink: Sink
        if a.sink_kind == "iceberg":
            from rowbus.spark_apply.iceberg_sink import IcebergSink

            self.sink = IcebergSink(
                config.sink,
                a.job,
                a.state_database,
                self.router,
                self.catalog.get,
                a.iceberg,
                self._known_schemas,
            )
        else:
            self.sink = MySQLSink(
                config.sink,
                a.job,
                a.state_database,
                self.router,
                self.catalog.get,
                a.mode,
                a.parallelism,
            )
        self._partitions: dict[str, int] = {}
        self.metrics = ApplyMetrics()
        self.writer = BatchWriter()
        """Writes a planned batch while Spark reads the next (`overlap`)."""
        self.stall = StallReporter()
        """Says what held events wait for when batches release nothing (issue #33)."""

    def _known_schemas(self) -> list[TableSchema]:
        """Every table schema in the schemas topic (the Iceberg sink checks their types
        before Spark starts)."""
        self.catalog.catch_up()
        return list(self.catalog.known().values())

    def start(self) -> BatchApplier:
        try:
            self.sink.start()
        except BaseException:
            self.catalog.close()  # the sink may have read the schemas topic (Iceberg's check)
            raise
        if self.shard_ddl is not None:
            self.shard_ddl.start()
        return self

    def drain(self) -> None:
        """Until the last batch handed over is written; raises its failure."""
        self.writer.wait()

    @property
    def mysql_sink(self) -> MySQLSink:
        """The sink as throughput mode writes it (its settings refuse the Iceberg sink)."""
        if not isinstance(self.sink, MySQLSink):
            raise ApplyError(f"apply.mode {self.config.apply.mode} writes to the MySQL sink only")
        return self.sink

    def sink_done(self) -> int:
        """The last batch the sink holds whole (-1: none)."""
        head = self.sink.head()
        if head is None:
            return -1
        return head.batch_id if head.complete else head.batch_id - 1

    def close(self) -> None:
        self.writer.close()
        self.sink.close()
        self.catalog.close()
        if self.shard_ddl is not None:
            self.shard_ddl.close()

    def expected(self, seen: Iterable[tuple[str, int]]) -> list[PairKey]:
        """(topic, partition, source) pairs whose watermarks gate the release."""
        if not self._partitions or any(p >= self._partitions.get(t, 0) for t, p in seen):
            self._partitions = _partition_counts(self.config.kafka, list(self.topics))
        return [(t, p, s) for t, s in self.topics.items() for p in range(self._partitions[t])]

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.sink.fault is not None:
            self.sink.fault.batch_started(batch_id)  # a test's kill point (`apply_faults`)
        try:
            with collector_paused():
                self._apply_batch(df, batch_id)
        except Exception as exc:  # noqa: BLE001 - handed on to Spark as BatchFailure
            # Spark gets the failure as text (py4j's Python traceback inside its own
            # exception) and, when the query is being stopped, runs a regex over it that
            # recurses per character: a long message ended its stream thread with a
            # StackOverflowError. So Spark gets one short line; the trace is logged here once.
            failure = BatchFailure(exc)
            if failure.interrupted:
                log.info("batch %d interrupted by the query's stop; it runs again", batch_id)
            else:
                self.metrics.errors[type(exc).__name__] += 1
                trace_log.error("batch %d failed", batch_id, exc_info=exc)
            raise failure from None

    def _apply_batch(self, df: Any, batch_id: int) -> None:
        started = time.perf_counter()
        a = self.config.apply
        if a.mode == "throughput":
            from rowbus.spark_apply.owned import apply_owned

            apply_owned(self, df, batch_id)
            return
        sink = self.sink
        if (
            isinstance(sink, MySQLSink)
            and sink.remote is None
            and a.mode == "parallel"
            and a.executor_writes
        ):
            sink.remote = executor_runner(df.sparkSession.sparkContext)
        self.plan_on_driver(df, batch_id, started)

    def plan_on_driver(self, df: Any, batch_id: int, started: float) -> None:
        """Read and decode a batch on the driver, plan it and hand its write to the batch
        writer: snapshot and parallel modes, and throughput mode's batches it leaves to the
        driver (`owned._fallback`)."""
        from rowbus.spark_apply.owned import held_rows

        # Read and decode while the batch before is still being written (`overlap`): neither
        # touches the sink or the catalog.
        # The Iceberg sink writes typed values: its rows are decoded, not rendered.
        rendered = self.config.apply.sink_kind == "mysql"
        ranges, wire, envelopes, collected = read_batch(df, self.metrics, rendered=rendered)
        held = held_rows(
            df.sparkSession, self.config.kafka, wire if rendered else None, self.metrics
        )
        self._plan_and_write(batch_id, ranges, wire, envelopes, started, collected, held)

    def _plan_and_write(
        self,
        batch_id: int,
        ranges: dict[tuple[str, int], tuple[int, int]],
        wire: Wire,
        envelopes: list[Envelope],
        started: float,
        collected: float,
        held: Callable[[PlannerState], list[Envelope]],
    ) -> None:
        """Plan a batch read and decoded on the driver (`ranges`: Spark's offsets of it) over
        the state the sink holds, and hand its write to the batch writer. `held` reads again
        what the state names as held in Kafka (a batch of throughput mode before this one)."""
        a = self.config.apply
        records = len(envelopes)
        decoded = time.perf_counter()
        self.drain()
        waited = time.perf_counter()
        previous = self.sink.previous_state(batch_id)
        # Before skipping or applying: Spark's offsets for this batch must fit the sink's.
        self.sink.check_offsets(batch_id, ranges, previous)
        if previous is None:
            log.info("batch %d is already committed in the sink; skipped", batch_id)
            return
        if previous.reread:
            _read_held(batch_id, previous, envelopes, held)
        for env in envelopes:
            if isinstance(env.event, DdlChange) and env.event.table_schema is not None:
                self.catalog.add(env.event.table_schema)
        expected = self.expected({(e.topic, e.partition) for e in envelopes})
        hook = self.shard_ddl
        if hook is not None:
            hook.before_plan()
        gate: Callable[[Envelope], bool] = hook.ddl_ready if hook else lambda _: True
        stored = self.sink.stored_gates(batch_id) if hook else None
        if stored is not None:
            gate = stored_gate(stored, gate)
        spill = self.sink.spill_for(batch_id, wire)
        try:
            p = plan(
                previous,
                envelopes,
                expected,
                gate,
                spill=spill,
                memory_limit=_memory_limit(records),
            )
        except BaseException:
            spill.close()
            raise
        del envelopes[:]  # the batch's decoded events: the plan holds what it needs
        if a.mode == "throughput" and not p.gates and hook is None:
            p = _held_by_reread(p)
        planned = time.perf_counter()
        timings = (collected - started, decoded - collected, waited - decoded, planned - waited)

        def write() -> None:
            try:
                began = time.perf_counter()
                with collector_paused():
                    applied = self.sink.apply(batch_id, p)
                seconds = time.perf_counter() - began
            finally:
                spill.close()
            if hook is not None:
                hook.after_apply(p)
            self._observe(p, applied, seconds)
            log.info(
                "batch %d: %d records, %d rows applied in %d step(s), watermark %d, stash %d; "
                "collect %.3fs decode %.3fs wait %.3fs plan %.3fs apply %.3fs",
                batch_id,
                records,
                applied,
                len(p.steps),
                p.bound,
                p.state.stash_events,
                *timings,
                seconds,
            )
            self.stall.observe(batch_id, applied, p.state.stash_events, p.bound, p.held, p.blockers)

        self.writer.submit(write)
        if not a.overlap_batches:
            self.drain()

    def _observe(self, p: Any, applied: int, seconds: float) -> None:
        m = self.metrics
        m.batches += 1
        m.rows_applied += applied
        m.watermark_ts = max(m.watermark_ts, p.bound)
        m.stash_events = p.state.stash_events
        m.split_transactions += len(p.splits)
        if self.shard_ddl is not None:
            m.stuck_locks = len(self.shard_ddl.wedge.stuck())
        m.lanes = {f"{t}[{part}]/{src}": ts for (t, part, src), ts in p.state.watermarks.items()}
        m.apply_latency.observe(seconds)


def _read_held(
    batch_id: int,
    previous: PlannerState,
    envelopes: list[Envelope],
    held: Callable[[PlannerState], list[Envelope]],
) -> None:
    """The batch before was throughput mode's, which left its held rows in Kafka
    (`PlannerState.reread`), not in the stash; the driver's path keeps none there, so they are
    read again into `envelopes` now (the merge engine drops those already released), or they
    would never be applied."""
    again = held(previous)
    log.info(
        "batch %d: %d record(s) throughput mode held in Kafka read again", batch_id, len(again)
    )
    envelopes[:0] = again


def _held_by_reread(p: Plan) -> Plan:
    """Throughput mode: the plan with its held events left in Kafka (read again by the next
    batch, `release.held_by_reread`) rather than in the sink's stash, so that the next batch
    can be the executors' again; unchanged when the hold is too long for that."""
    from rowbus.spark_apply.release import held_by_reread
    from rowbus.spark_apply.throughput import REREAD_LIMIT

    reread = held_by_reread(p.state, REREAD_LIMIT)
    return p if reread is None else dataclasses.replace(p, state=reread)


def read_batch(
    df: Any, metrics: ApplyMetrics, rendered: bool = True
) -> tuple[dict[tuple[str, int], tuple[int, int]], Wire, list[Envelope], float]:
    """A micro-batch's offset ranges, record bytes and envelopes, and when it was collected
    (`rendered`: rows the executors rendered are built from their literals, else decoded);
    counted in `metrics`."""
    arrow = df.toArrow()
    collected = time.perf_counter()
    metrics.read(arrow)
    wire: Wire = {}
    return offset_ranges(arrow), wire, envelopes_of(arrow, wire if rendered else None), collected


def executor_runner(sc: Any) -> Callable[[list[ShardWrite]], list[int]]:
    """Runs shard writes as Spark tasks, one per shard (`rowbus.spark_apply.shard_writes`)."""

    def run(writes: list[ShardWrite]) -> list[int]:
        rdd = sc.parallelize(writes, len(writes))
        return list(rdd.map(write_shard).collect())

    return run


def offset_ranges(table: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(first, last) offset per (topic, partition) in an Arrow batch of the source schema."""
    if table.num_rows == 0:
        return {}
    grouped = table.group_by(["topic", "partition"]).aggregate(
        [("offset", "min"), ("offset", "max")]
    )
    return {
        (t, p): (lo, hi)
        for t, p, lo, hi in zip(
            grouped.column("topic").to_pylist(),
            grouped.column("partition").to_pylist(),
            grouped.column("offset_min").to_pylist(),
            grouped.column("offset_max").to_pylist(),
            strict=True,
        )
    }


def envelopes_of(table: Any, wire: Wire | None = None) -> list[Envelope]:
    """Arrow rows of the source schema → envelopes; watermarks are rebuilt without decoding,
    and rows the executors rendered (`rendered.ROW_COLUMN`) are built from their text with
    `literals.LitImage` images (their bytes go into `wire`); other rows are decoded."""
    names = ["topic", "partition", "offset", "kind", "source", "ts", "encoding", "value"]
    rendered = ROW_COLUMN in table.column_names and wire is not None
    cols = {name: table.column(name).to_pylist() for name in names}
    texts = table.column(ROW_COLUMN).to_pylist() if rendered else [None] * table.num_rows
    keys: dict[str, tuple[str, ...]] = {}
    out: list[Envelope] = []
    event: Any
    for i in range(table.num_rows):
        topic, partition, offset = cols["topic"][i], cols["partition"][i], cols["offset"][i]
        kind = cols["kind"][i]
        text = texts[i]
        if text is not None:
            assert wire is not None
            event = row_event(text, cols["source"][i], cols["ts"][i], keys)
            wire[id(event)] = (event, cols["value"][i])
        elif kind == "resolved":
            event = Resolved(source=cols["source"][i], ts=cols["ts"][i])
        elif kind == "heartbeat":
            event = Heartbeat(
                source=cols["source"][i],
                ts=cols["ts"][i],
                reader_id="",
                position=_NOWHERE,
                lag_ms=0,
            )
        else:
            enc = cols["encoding"][i]
            headers = [(ENCODING_HEADER, enc.encode())] if enc else None
            event = decode(cols["value"][i], headers, f"{topic}[{partition}]@{offset}")
        out.append(Envelope(topic, partition, offset, event))
    return out


_NOWHERE = BinlogPosition("", 0)


def _partition_counts(kafka: dict[str, Any], topics: list[str]) -> dict[str, int]:
    from rowbus.clients import kafka as clients_kafka

    meta = clients_kafka.admin(kafka).list_topics(timeout=10)
    for topic in topics:
        if topic not in meta.topics or meta.topics[topic].error is not None:
            raise MissingTopicError(topic)
    return {t: len(meta.topics[t].partitions) for t in topics}


def spark_session(config: JobConfig) -> Any:
    """A SparkSession for the job (getOrCreate: an existing one is reused).

    The master comes from whoever launched the job: under ``spark-submit --master …`` it is
    already in Spark's configuration and must not be overridden (a builder's `master` would
    win); only a plain ``python -m rowbus.spark_apply`` (what ``rowbus apply`` runs) takes
    ``apply.master``."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    a = config.apply
    builder = SparkSession.builder.appName(f"rowbus-apply-{a.job}")
    conf: dict[str, str] = {}
    if not launched_by_spark_submit():
        builder = builder.master(a.master)
        conf.update(local_bind(a.master))
    conf = {
        **conf,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        # A service's log, not a terminal's: no progress bar redrawn on stderr.
        "spark.ui.showConsoleProgress": "false",
        # A crash of a Python worker (a C extension, librdkafka) reports its stack to the task's
        # error instead of "Python worker exited unexpectedly".
        "spark.python.worker.faulthandler.enabled": "true",
        # A worker the JVM hangs up on as the job stops exits without printing a trace after
        # the job's one line (`quiet_daemon`).
        "spark.python.daemon.module": "rowbus.spark_apply.quiet_daemon",
        **a.spark_conf,
    }
    if a.mode == "throughput":
        # Its one cache (`owned.apply_owned`) is read twice and dropped within the batch:
        # compressing its columns (the rendered text above all) costs JVM CPU per row and
        # saves nothing that lasts (measured: 43.6 against 48.8-63.3 µs of JVM per row).
        conf.setdefault("spark.sql.inMemoryColumnarStorage.compressed", "false")
    if a.jdbc_jar is not None:
        conf["spark.jars"] = str(a.jdbc_jar)
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


LOOPBACK = "127.0.0.1"


def local_bind(master: str) -> dict[str, str]:
    """The Spark settings that keep a ``local[…]`` master on loopback: the driver (and the
    block manager it runs) binds and advertises 127.0.0.1 instead of the machine's first
    interface, and the JVM's own address lookup (``SPARK_LOCAL_IP``, read when the JVM starts)
    agrees. Every session of ours is built by `spark_session`, so this is decided once for the
    job, the benchmarks and the tests; another master (a cluster) is left to its launcher."""
    if not master.startswith("local"):
        return {}
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    return {"spark.driver.bindAddress": LOOPBACK, "spark.driver.host": LOOPBACK}


def resume(checkpoint: Path, applier: BatchApplier) -> None:
    """Spark's checkpoint brought to what the sink holds before a query starts: a batch still
    being written as the last run stopped runs again (`overlap.rewind`), and a checkpoint
    folder without batches (deleted, or new) while the sink holds some continues after the
    sink's last whole batch (`overlap.seed`), instead of Spark starting again at batch 0
    from the topics' start — which the sink refuses. A sink part-way through a batch cannot
    be continued without that batch's offsets: refused with one line."""
    done = applier.sink_done()
    if done >= 0 and not has_batches(checkpoint):
        head = applier.sink.head()
        if head is not None and not head.complete:
            raise CheckpointConflictError(
                f"job {applier.config.apply.job}: Spark's checkpoint folder {checkpoint} holds "
                f"no batch, and the sink is part-way through batch {head.batch_id} (step "
                f"{head.step}), whose offsets only that folder knew: restore the folder "
                "(apply.checkpoint_location), or clear the sink's state to apply everything again"
            )
        state = applier.sink.previous_state(done + 1)
        if state is not None:
            seed(checkpoint, done, state.offsets)
    rewind(checkpoint, done)


def start_query(spark: Any, config: JobConfig, applier: BatchApplier) -> Any:
    """Start the streaming query (the applier must be started); returns the StreamingQuery.
    Spark's checkpoint is first brought back to the sink's head when a batch was still being
    written as the last run stopped (`overlap.rewind`)."""
    a = config.apply
    resume(a.checkpoint_location, applier)
    topics = ",".join(applier.topics)
    if a.kafka_format == "spark":
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", config.kafka["bootstrap.servers"])
            .option("subscribe", topics)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("includeHeaders", "true")
        )
        if a.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", a.max_offsets_per_trigger)
        df = _from_spark_kafka(reader.load())
    else:
        from rowbus.spark_apply.source import RowbusKafkaSource, kafka_options

        spark.dataSource.register(RowbusKafkaSource)
        reader = (
            spark.readStream.format("rowbus_kafka")
            .option("topics", topics)
            .options(**kafka_options(config.kafka))
            # As many read tasks as the cluster runs at once: each has a fixed cost
            # (`source.group_ranges`).
            .option("tasks", str(spark.sparkContext.defaultParallelism))
        )
        if a.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(a.max_offsets_per_trigger))
        if "://" not in str(a.checkpoint_location):
            # Beside Spark's offset log, whose positions it describes (a new or deleted
            # checkpoint folder starts without it: nothing to compare the first range with).
            path = Path(a.checkpoint_location).absolute() / BOUNDARIES_FILE
            reader = reader.option("boundaries", str(path))
        df = reader.load()
    writer = (
        df.writeStream.foreachBatch(applier)
        .option("checkpointLocation", str(a.checkpoint_location))
        .queryName(f"rowbus_apply_{a.job}".replace("-", "_").replace(".", "_"))
    )
    if a.available_now:
        writer = writer.trigger(availableNow=True)
    elif a.trigger_interval_s:
        writer = writer.trigger(processingTime=f"{a.trigger_interval_s} seconds")
    return writer.start()


def await_query(query: Any, applier: BatchApplier) -> None:
    """Until the query ends and its last batch is written. A write that fails while no batch
    follows it ends the query with that failure at once, instead of at the next batch."""
    while not query.awaitTermination(_WRITE_CHECK_S):
        failure = applier.writer.failure()
        if failure is not None:
            query.stop()
            break
    applier.drain()


_WRITE_CHECK_S = 0.5
"""How often a running query's in-flight write is checked for a failure."""


def _from_spark_kafka(df: Any) -> Any:
    """Spark's kafka format → the columns of `source.SCHEMA` (kind/source/ts are decoded on
    the driver from the value, so only the encoding header is extracted here)."""
    from pyspark.sql import functions as sf

    enc = sf.expr(f"cast(filter(headers, h -> h.key = '{ENCODING_HEADER}')[0].value as string)")
    return df.select(
        "topic",
        "partition",
        "offset",
        sf.lit(None).cast("string").alias("kind"),
        sf.lit(None).cast("string").alias("source"),
        sf.lit(None).cast("long").alias("ts"),
        enc.alias("encoding"),
        "value",
    )


SHARDED_THROUGHPUT = (
    "apply.mode is throughput but a route is sharded: shard-DDL coordination has every batch "
    "planned by the driver (snapshot mode's path, counted in driver_fallbacks_total), so the "
    "executors write nothing of their own; set apply.mode: snapshot for this job, or keep "
    "sharded routes in a job of their own"
)
"""Logged once as such a job starts: throughput mode's own path never runs for it."""


def shard_ddl_hook(config: JobConfig) -> ShardDdlHook | None:
    """The shard-DDL coordinator hook, when a route is sharded; None otherwise."""
    if not any(route.sharded for route in config.apply.routes):
        return None
    if config.apply.mode == "throughput":
        log.warning(SHARDED_THROUGHPUT)
    settings = config.apply.shard_ddl
    if not config.shard_tables:
        raise ApplyError(
            "a route is sharded but apply.shard_ddl.tables is empty: list the upstream tables "
            "of each shard group as source/schema.table (rowbus apply fills it in from the sources)"
        )
    from rowbus.shard_ddl.election import ZkElection

    actor = f"{config.apply.job}@{socket.gethostname()}:{os.getpid()}"
    election = None
    if config.zookeeper_hosts:
        election = ZkElection(
            config.zookeeper_hosts,
            actor,
            root=config.zookeeper_root,
            name=settings.election,
            auth=config.zookeeper_auth,
        ).start()
    return ShardDdlHook(
        config,
        config.shard_tables,
        control_topic=settings.control_topic,
        election=election,
        actor=actor,
        optimistic=settings.optimistic,
        state_database=settings.state_database,
        wedge_report_s=settings.wedge_report_s,
    )


def _started_applier(config: JobConfig) -> BatchApplier:
    return BatchApplier(config, shard_ddl_hook(config)).start()


def _applier_before_spark(config: JobConfig) -> BatchApplier | None:
    """The first applier, started before the Spark session: a sink that refuses the job's
    login or the grants its state tables need (or a shard-DDL hook that cannot start) is
    refused in one line before Spark spends seconds starting. None when the sink does not
    answer yet: the job's loop waits for it as for a sink that goes away later."""
    try:
        return _started_applier(config)
    except Exception as exc:
        failure = retryable(exc)
        if failure is None:
            raise
        log.info("%s; the job waits for the sink once Spark has started", failure)
        return None


spark_started = threading.Event()
"""Set once `run` has its Spark session: a stop before it has no query to finish, only a JVM
that is starting (`__main__` bounds that stop)."""


def run(config: JobConfig) -> None:
    """Run the job until it fails or (with ``available_now``) until it has caught up. A sink
    that goes away is waited for up to ``apply.sink_retry_s`` each time, then the query
    starts again from its checkpoint (`recovery`). What the sink refuses at start-up is
    refused before Spark starts (`_applier_before_spark`)."""
    ready = _applier_before_spark(config)
    try:
        spark = spark_session(config)
    except BaseException:
        if ready is not None:
            ready.close()
        raise
    spark_started.set()
    applier: BatchApplier | None = None
    # What is alive now (interpreter, pyspark, py4j, the clients) lives as long as the job:
    # the collector's full passes need not traverse it again (`collector_paused`).
    gc.freeze()
    exporter = None
    if config.apply.metrics_port is not None:
        exporter = Exporter()
        exporter.register(
            "apply",
            lambda: applier.metrics.prometheus() if applier is not None else {},
            labels={
                "lane_watermark_ts": "lane",
                "errors_total": "kind",
                "driver_fallbacks_total": "reason",
            },
            static={"job": config.apply.job},
        )
        port = exporter.serve(config.apply.metrics_port)
        log.info("metrics of job %s on http://127.0.0.1:%d/metrics", config.apply.job, port)
    try:
        while True:
            failure = None
            query: Any = None
            applier = None  # the last one is closed: a failed start must not close it again
            try:
                applier = ready if ready is not None else _started_applier(config)
                ready = None
                query = start_query(spark, config, applier)
                await_query(query, applier)
                return
            except Exception as exc:
                failure = retryable(exc)
                if failure is None or config.apply.sink_retry_s <= 0:
                    raise
            finally:
                # Also on a stop signal: end the query, so the next one (or the session's
                # end) finds no other running.
                if query is not None:
                    with contextlib.suppress(Exception):
                        query.stop()
                if applier is not None:
                    applier.close()
            log.warning(
                "%s; the query starts again from its checkpoint once the sink answers "
                "(waiting up to %.0f s, apply.sink_retry_s)",
                failure,
                config.apply.sink_retry_s,
            )
            if not wait_for_sink(config.sink, time.monotonic() + config.apply.sink_retry_s):
                raise SinkUnavailableError(
                    f"{failure}; the sink did not answer for {config.apply.sink_retry_s:.0f} s "
                    "(apply.sink_retry_s)"
                )
    finally:
        if exporter is not None:
            exporter.close()
        with contextlib.suppress(Exception):
            spark.stop()
