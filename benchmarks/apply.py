"""Apply benchmark: rows/s from Kafka into the sink, and commit-to-visible lag at a fixed rate.

    python -m benchmarks.apply [--kafka H:P] [--sink H:P] [--source H:P] [--only PART] …

Parts (all but ``lag2`` by default; nothing is asserted, figures are printed):

- ``path``: the driver's apply path alone, in process, without Spark: W1 events as the source's
  Arrow batches → envelopes → plan → collapse → SQL → the sink, per phase (``--profile`` prints
  the hottest functions).
- ``baseline``: the same W1 rows as one Python process inserts them bare into the sink
  (multi-row INSERTs of 1,000 rows, a commit every 20,000): the rows/s ``apply`` is set against.
- ``apply``: W1 (10 columns, 100-row transactions) pre-published to a topic exactly as a reader
  publishes it (rows, then a Resolved to every partition per transaction), then the Spark job
  run ``available_now`` over it: wall time, and the steady rate and CPU per applied row by
  process over the batches after the first ``--warm-batches`` (``--steady-batches``, 10 by
  default, which size the rows published); CPU by process at every batch's end too
  (`benchmarks.batch_cpu`), so the JVM's warm-up shows as it fades.
- ``apply`` with ``--tasks 1,2,4`` (parallel and throughput modes: ``apply.parallelism``) and
  ``--sink-rtt-ms`` / ``--sink-kbps``: the same pre-published rows applied once per task count
  in one run, every sink connection through a throttling loopback proxy
  (``tests/faults/proxy.py`` in a process of its own) as a remote sink limits each connection;
  one ``scale`` line per configuration: steady rows/s, the ratio to the first task count of its
  master and mode, CPU per applied row by process.
- ``lag``: a real reader (``rowbus reader run`` in a subprocess) on a source, the Spark job
  running, W1 written at ``--rate`` rows/s; each transaction's commit time against the moment
  its last row is visible in the sink (polled): p50/p99.
- ``lag2``: W2 on two sources (``--rate`` row changes/s in all, single-row transactions,
  ``--writers`` connections per source) through two real readers into the running job: the
  commit-to-visible lag of its inserts, the run's thirds compared to tell whether lag grows.

This tool drives the whole platform, so unlike the job it borrows from the application shell
(the reader subprocess, the W1 workload).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from benchmarks.batch_cpu import BatchCpu, Window
from benchmarks.cpu import KINDS, CpuSample, cores, per_row
from benchmarks.workloads import w1_table, w1_transactions
from rowbus.clients import kafka as clients_kafka
from rowbus.clients import mysql
from rowbus.protocol.codec import encode
from rowbus.protocol.events import (
    Resolved,
    TableSchema,
)
from rowbus.protocol.partition import encode_key, java_partition

W1_SINK_DDL = (
    "CREATE TABLE {name} (id BIGINT PRIMARY KEY, i INT, b BIGINT, s VARCHAR(64), "
    "d DECIMAL(12,2), t DATETIME(6), f DOUBLE, y TINYINT, x TEXT, dt DATE)"
)


def w1_records(
    source: str, table: TableSchema, rows: int, partitions: int, per_txn: int = 100, seed: int = 1
) -> list[tuple[int, bytes | None, Any]]:
    """(partition, key, record) of W1 inserts as a reader publishes them: each transaction's
    rows by key, then a Resolved at its ts to every partition."""
    out: list[tuple[int, bytes | None, Any]] = []
    for ts, txn in w1_transactions(source, rows, per_txn=per_txn, seed=seed, table=table):
        for ev in txn:
            key = encode_key(table.schema, table.table, (ev.after[0],) if ev.after else ())
            out.append((java_partition(key, partitions), key, ev))
        out.extend((p, None, Resolved(source=source, ts=ts)) for p in range(partitions))
    return out


def arrow_batch(topic: str, records: list[tuple[int, bytes | None, Any]]) -> Any:
    """The records as the source's `read()` yields them: encoded as a reader publishes them,
    then read by the executors' own code (`source.append_messages`), partition by partition."""
    import pyarrow as pa

    from rowbus.spark_apply.source import KafkaRange, append_messages, arrow_schema
    from rowbus.testing.messages import Message

    by_partition: dict[int, list[Message]] = {}
    for partition, _key, record in records:
        msgs = by_partition.setdefault(partition, [])
        msgs.append(Message.of(record, len(msgs)))
    cols: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    for partition, msgs in sorted(by_partition.items()):
        append_messages(cols, KafkaRange(topic, partition, 0, len(msgs)), msgs, 0)
    return pa.Table.from_batches([pa.RecordBatch.from_pydict(cols, schema=arrow_schema())])


def sized_rows(max_per_trigger: int, partitions: int, bench: Bench, per_txn: int = 100) -> int:
    """W1 rows that fill the warm and the steady batches at `max_per_trigger` offsets a batch:
    each transaction of `per_txn` rows publishes a Resolved to every partition, and each of
    `publish`'s Kafka transactions a commit marker to every partition (an offset each).
    Rounded down to whole transactions, so the last batch is a little short rather than a
    tail of a few records after it (a batch's fixed cost over a handful of rows)."""
    offsets = (bench.warm_batches + bench.steady_batches) * max_per_trigger
    rows = offsets * per_txn // (per_txn + partitions) // per_txn * per_txn
    for _ in range(1000):  # a few transactions fewer at most
        records = rows // per_txn * (per_txn + partitions)
        markers = partitions * (records // _TXN_RECORDS + 1)
        if records + markers <= offsets or rows <= per_txn:
            break
        rows -= per_txn
    return max(per_txn, rows)


def _mode_batch(mode: str) -> int:
    """The job's batch size in `mode` where none is set (`ApplySettings`)."""
    from rowbus.spark_apply.settings import ApplySettings

    size = ApplySettings.model_validate({"mode": mode}).max_offsets_per_trigger
    return size or 50_000


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# -- services ----------------------------------------------------------------------------------


class Bench:
    """One benchmark run against the services of a rowbus configuration; unique names."""

    def __init__(self, settings: Any, partitions: int, max_per_trigger: int | None) -> None:
        self.settings = settings
        self.kafka: dict[str, Any] = settings.kafka.client_config()
        self.partitions = partitions
        self.max_per_trigger = max_per_trigger
        """The job's `max_offsets_per_trigger`; None: its mode's default."""
        self.topics: list[str] = []
        self.master = "local[2]"
        self.mode = "snapshot"
        self.parallelism = 2
        self.executor_writes = True
        self.overlap = True
        """The job writes a batch while it reads the next (`apply.overlap_batches`)."""
        self.profile: Any = None
        """A cProfile.Profile that the job's foreachBatch calls run under (--profile)."""
        self.databases: list[tuple[Any, str]] = []
        self.warm_batches = 1
        """Batches left out of the steady rate (the first: the session's and the driver's
        warm-up; a second one: the write tasks' Python workers starting; more: the JVM's
        compiling of Spark's per-job machinery, `benchmarks.batch_cpu`)."""
        self.steady_batches = 10
        """Batches the steady window should hold (`sized_rows` publishes enough for them)."""
        self.job_sink: Any = settings.resolved_sink
        """The sink as the job reaches it: the throttling proxy's port when one runs."""

    def topic(self, name: str, partitions: int) -> str:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        admin = clients_kafka.admin(self.kafka)
        new = NewTopic(name, num_partitions=partitions, replication_factor=1)
        new.config = {"retention.ms": "-1"}
        admin.create_topics([new])[name].result(15)
        self.topics.append(name)
        return name

    def connect(self, server: Any, autocommit: bool = True) -> Any:

        return mysql.connect(
            server,
            autocommit=autocommit,
        )

    def database(self, server: Any, name: str, ddl: str | None = None) -> str:
        with self.connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
            if ddl:
                cur.execute(ddl.format(name=f"`{name}`.`w1`"))
        self.databases.append((server, name))
        return name

    def job_config(
        self,
        job: str,
        sources: list[str],
        schemas: str,
        upstream: str,
        sink: str,
        checkpoint: str,
        available_now: bool,
        routes: bool = True,
    ) -> Any:
        from rowbus.routing.routes import RouteSettings
        from rowbus.spark_apply.settings import (
            ApplySettings,
            JobConfig,
        )

        s = self.job_sink
        return JobConfig(
            apply=ApplySettings(
                job=job,
                sources=tuple(sources),
                topic_template="{source}",
                schemas_topic=schemas,
                routes=(
                    (RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}"),)
                    if routes
                    else ()
                ),
                unrouted="skip" if routes else "identity",
                master=self.master.split(" ")[0],
                mode=self.mode,
                parallelism=self.parallelism,
                executor_writes=self.executor_writes,
                overlap_batches=self.overlap,
                checkpoint_location=checkpoint,
                state_database=f"{sink}_state",
                spark_conf={"spark.ui.showConsoleProgress": "false"},
                available_now=available_now,
                **(
                    {"max_offsets_per_trigger": self.max_per_trigger}
                    if self.max_per_trigger
                    else {}
                ),
            ),
            kafka=self.kafka,
            sink=s,  # the configured sink whole: its TLS and password settings included
        )

    def cpu_ports(self, *sources: Any) -> tuple[int, int, tuple[int, ...]]:
        """`CpuSample.take`'s ports: the sink's, the broker's (the first bootstrap server) and
        those of the source servers `sources`."""
        hostport = str(self.kafka["bootstrap.servers"]).split(",")[0]
        sink = int(self.settings.resolved_sink.port)
        return sink, int(hostport.rsplit(":", 1)[1]), tuple(int(s.port) for s in sources)

    def cleanup(self) -> None:

        for server, name in self.databases:
            with self.connect(server) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cur.execute(f"DROP DATABASE IF EXISTS `{name}_state`")
        if self.topics:
            admin = clients_kafka.admin(self.kafka)  # kept alive until the futures resolve
            for f in admin.delete_topics(self.topics).values():
                f.result(15)


_TXN_RECORDS = 20_000
"""Records `publish` commits in one Kafka transaction."""


def publish(
    kafka: dict[str, Any],
    topic: str,
    schemas: str,
    table: TableSchema,
    records: list[tuple[int, bytes | None, Any]],
) -> float:
    """Publish as a reader does (Kafka transactions, the schema first); seconds taken."""

    from rowbus.protocol.events import SchemaRecord

    started = time.perf_counter()
    producer = clients_kafka.producer(
        {**kafka, "transactional.id": unique("bench"), "linger.ms": 20}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    value, headers = encode(SchemaRecord.of(table, records[0][2].source, 0))
    producer.produce(schemas, value, partition=0, headers=_headers(headers))
    for n, (partition, key, record) in enumerate(records):
        value, headers = encode(record)
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, headers=_headers(headers))
                break
            except BufferError:
                producer.poll(0.05)
        if n % _TXN_RECORDS == _TXN_RECORDS - 1:
            producer.commit_transaction(60)
            producer.begin_transaction()
    producer.commit_transaction(60)
    producer.flush(60)
    return time.perf_counter() - started


def _headers(headers: list[tuple[str, bytes]]) -> list[tuple[str, str | bytes | None]]:
    return list(headers)


def checkpoint_rate(bench: Bench, state_db: str) -> tuple[int, float, float]:
    """(rows, seconds, rows/s) between the end of the first `bench.warm_batches` batches
    and the end of the last."""
    with bench.connect(bench.settings.resolved_sink) as conn, conn.cursor() as cur:
        # shard -1: a throughput batch's closing marker, whose count repeats its tasks' rows
        cur.execute(
            f"SELECT batch_id, committed_at, row_count FROM `{state_db}`.apply_checkpoint "
            "WHERE shard >= 0 ORDER BY committed_at"
        )
        rows = cur.fetchall()
    warm = sorted({r[0] for r in rows})[: bench.warm_batches]
    ended = max((r[1] for r in rows if r[0] in warm), default=None)
    later = [r for r in rows if r[0] not in warm]
    if ended is None or not later:
        return sum(r[2] for r in rows), 0.0, 0.0
    n = sum(r[2] for r in later)
    seconds = (later[-1][1] - ended).total_seconds()
    return n, seconds, n / seconds if seconds else 0.0


# -- parts -------------------------------------------------------------------------------------


def make_applier(bench: Bench, config: Any) -> Any:
    """The job's BatchApplier, started; under `bench.profile` when profiling: every
    micro-batch's driver work (foreachBatch) adds to that profile."""
    import gc

    from rowbus.spark_apply.job import BatchApplier

    gc.freeze()  # as the job's `run` does once its session is up
    profile = bench.profile
    if profile is None:
        return BatchApplier(config).start()

    class Profiled(BatchApplier):
        def __call__(self, df: Any, batch_id: int) -> None:
            profile.enable()
            try:
                super().__call__(df, batch_id)
            finally:
                profile.disable()

    return Profiled(config).start()


def print_profile(bench: Bench) -> None:
    import pstats

    if bench.profile is not None and bench.profile.getstats():
        print("driver profile of every micro-batch (foreachBatch), hottest first:")
        pstats.Stats(bench.profile).sort_stats("tottime").print_stats(25)


def bench_path(bench: Bench, rows: int, profile: bool) -> None:
    """The driver's apply path in process: Arrow → envelopes → plan → sink."""
    import cProfile
    import pstats

    from rowbus.routing.routes import Router, RouteSettings
    from rowbus.spark_apply.gc_pause import collector_paused
    from rowbus.spark_apply.job import envelopes_of
    from rowbus.spark_apply.planner import PlannerState, plan
    from rowbus.spark_apply.sink import MySQLSink

    table = w1_table("bench_up")
    sink_db = bench.database(bench.settings.resolved_sink, unique("bench_path"), W1_SINK_DDL)
    records = w1_records("src", table, rows, bench.partitions)
    r0 = time.perf_counter()
    batch = arrow_batch("topic", records)
    rendered = time.perf_counter() - r0
    s = bench.settings.resolved_sink
    router = Router([RouteSettings(match="bench_up.*", target=f"{sink_db}.{{table}}")], "skip")
    conn = s
    expected = [("topic", p, "src") for p in range(bench.partitions)]
    prof = cProfile.Profile() if profile else None
    with MySQLSink(conn, "bench", f"{sink_db}_state", router, {table.schema_id: table}.get) as sink:
        if prof:
            prof.enable()
        with collector_paused():  # as the job's batches run
            t0 = time.perf_counter()
            wire: dict[int, Any] = {}
            envelopes = envelopes_of(batch, wire)
            t1 = time.perf_counter()
            p = plan(PlannerState(), envelopes, expected)
            t2 = time.perf_counter()
            applied = sink.apply(0, p)
            t3 = time.perf_counter()
        if prof:
            prof.disable()
    print(
        f"path: {applied} W1 rows in {t3 - t0:.2f}s = {applied / (t3 - t0):,.0f} rows/s "
        f"(envelopes {applied / (t1 - t0):,.0f}/s, plan {applied / (t2 - t1):,.0f}/s, "
        f"collapse+SQL+sink {applied / (t3 - t2):,.0f}/s); the executors' part in process "
        f"(encode, read, render): {len(records) / rendered:,.0f} records/s"
    )
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


@dataclass(frozen=True, slots=True)
class Published:
    """W1 rows pre-published once, applied by every configuration of a run."""

    rows: int
    source: str
    schemas: str
    upstream: str


def publish_w1(bench: Bench, rows: int) -> Published:
    source = bench.topic(unique("bench.w1"), bench.partitions)
    schemas = bench.topic(unique("bench.schemas"), 1)
    upstream = unique("bench_up")
    table = w1_table(upstream)
    took = publish(
        bench.kafka, source, schemas, table, w1_records(source, table, rows, bench.partitions)
    )
    print(f"apply: {rows} W1 rows published in {took:.1f}s")
    return Published(rows, source, schemas, upstream)


@dataclass(frozen=True, slots=True)
class Applied:
    """One configuration's steady rate and CPU (None when no window was measured)."""

    rate: float
    rows: int
    cpu: CpuSample | None


def bench_apply(
    bench: Bench, published: Published, workdir: str, baseline: float | None = None
) -> Applied:
    """The pre-published W1 applied by the Spark job alone (available_now)."""
    from rowbus.spark_apply.job import await_query, spark_session, start_query

    rows, source, schemas, upstream = (
        published.rows,
        published.source,
        published.schemas,
        published.upstream,
    )
    sink_db = bench.database(bench.settings.resolved_sink, unique("bench_apply"), W1_SINK_DDL)
    config = bench.job_config(
        unique("job"),
        [source],
        schemas,
        upstream,
        sink_db,
        f"{workdir}/{unique('apply-cp')}",
        available_now=True,
    )
    started = time.perf_counter()
    spark = spark_session(config)
    ready = time.perf_counter()
    master = spark.sparkContext.master  # what the session runs on, not only what was asked
    if master != bench.master:
        master = f"{master}, asked {bench.master}"
    applier = make_applier(bench, config)
    cpu = BatchCpu(
        lambda: bench.connect(bench.settings.resolved_sink), f"{sink_db}_state", bench.cpu_ports()
    )
    try:
        query = start_query(spark, config, applier)
        cpu.start()
        await_query(query, applier)
        progress = list(query.recentProgress)
    finally:
        cpu.stop()
        applier.close()
    done = time.perf_counter()
    n, seconds, rate = checkpoint_rate(bench, f"{sink_db}_state")
    ratio = f", {rate / baseline:.2f}x the baseline" if baseline else ""
    how = "" if bench.mode == "snapshot" or bench.executor_writes else ", driver writes"
    how += "" if bench.mode == "snapshot" else f", {bench.parallelism} writing task(s)"
    how += "" if bench.overlap else ", batches not overlapped"
    print(
        f"apply [{master}, {bench.mode}{how}]: {rows} rows in {done - started:.1f}s wall "
        f"({rows / (done - started):,.0f} rows/s with a {ready - started:.1f}s session start and "
        f"the first batch); steady {rate:,.0f} rows/s ({n} rows in {seconds:.1f}s after the "
        f"first {bench.warm_batches} batch(es)){ratio}"
    )
    print_progress("apply", progress)
    m = applier.metrics
    if bench.mode == "throughput":
        print(
            f"apply [{bench.mode}]: {m.owned_batches} batches written by executor tasks, "
            f"driver fallbacks {dict(m.fallbacks)}"
        )
    return print_cpu(bench, cpu, rate, n)


def print_cpu(bench: Bench, cpu: BatchCpu, rate: float, n: int) -> Applied:
    """Per batch, CPU per applied row by process kind (the JVM's compiling shows as it fades);
    then the steady window (after `bench.warm_batches`): ``cpu per row: <process> <µs>``, and
    its two halves together, which differ when the window is not steady yet."""
    label = f"apply [{bench.mode}]"
    job = ("driver Python", "JVM", "Python workers")
    batches = cpu.per_batch()
    for w in batches:
        s = w.spent.seconds
        print(
            f"{label} batch {w.last}: {w.rows:,} rows in {w.seconds:.2f}s; cpu ms: "
            + " / ".join(f"{s[k] * 1e3:.0f}" for k in job)
            + f" (driver / JVM / Python workers; sink {s['sink'] * 1e3:.0f}), per row "
            + (f"{sum(s[k] for k in job) / w.rows * 1e6:.1f} µs" if w.rows else "-")
        )
    steady = cpu.steady(bench.warm_batches)
    if steady is None or not steady.rows:
        print(f"{label}: no steady window (fewer than {bench.warm_batches + 1} batches sampled)")
        return Applied(rate, n, None)
    print(
        f"{label} steady window: batches {steady.first}-{steady.last} ({steady.batches} after "
        f"{bench.warm_batches} warm), {steady.rows:,} rows in {steady.seconds:.1f}s"
        + (
            f"; fewer than the {bench.steady_batches} asked: publish more rows"
            if steady.batches < bench.steady_batches
            else ""
        )
    )
    print(per_row(label, steady.spent, steady.rows))
    inside = [w for w in batches if w.first >= steady.first and w.rows]
    half = len(inside) // 2
    if half:

        def together(part: list[Window]) -> str:
            spent = sum(w.spent.seconds[k] for w in part for k in job)
            per = spent / sum(w.rows for w in part) * 1e6
            return f"{per:.1f} µs (batches {part[0].last}-{part[-1].last})"

        print(
            f"{label} steady halves, job processes together: "
            f"{together(inside[:half])} -> {together(inside[half:])}"
        )
    return Applied(rate, steady.rows, steady.spent)


def scale_line(bench: Bench, applied: Applied, reference: Applied | None) -> str:
    """One line per configuration: rows/s, the ratio to the reference (the run's first task
    count of this master and mode), CPU per applied row by process kind."""
    ratio = (
        f"{applied.rate / reference.rate:.2f}x"
        if reference is not None and reference.rate
        else "1.00x"
    )
    cpu = "no CPU window"
    if applied.cpu is not None and applied.rows:
        cpu = ", ".join(
            f"{kind} {applied.cpu.seconds[kind] / applied.rows * 1e6:.1f}"
            for kind in KINDS
            if kind in applied.cpu.seconds
        )
        cpu = f"cpu per row (µs): {cpu}"
    return (
        f"scale [{bench.master}, {bench.mode}, {bench.parallelism} writing task(s)]: "
        f"{applied.rate:,.0f} rows/s steady, {ratio} the first task count; {cpu}"
    )


class ThrottledSink:
    """The sink behind ``python -m tests.faults.proxy`` in a process of its own (its CPU is
    counted apart: `benchmarks.cpu` kind "sink proxy"): every connection of the job pays
    the round trip and the byte rate; the benchmark's own probes go to the sink directly."""

    def __init__(self, sink: Any, rtt_ms: float, kbps: float) -> None:
        import subprocess
        import sys
        from pathlib import Path

        root = str(Path(__file__).resolve().parents[1])
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.faults.proxy",
                f"{sink.host}:{sink.port}",
                "--rtt-ms",
                str(rtt_ms),
                "--kbps",
                str(kbps),
                "--with-parent",
            ],
            cwd=root,
            stdin=subprocess.PIPE,  # closed when this process ends, however: the proxy ends too
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # its port, once it listens
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the sink proxy did not start: {line!r}")
        self.sink = sink.model_copy(update={"port": int(line)})
        print(
            f"sink throttled per connection: {rtt_ms:g} ms round trip, "
            f"{kbps:g} KB/s each way (proxy port {int(line)})"
        )

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def bench_baseline(bench: Bench, rows: int) -> float:
    """The same W1 rows as one Python process inserts them bare: multi-row INSERTs of 1,000
    rows (pymysql escaping), committed every 20,000; rows/s."""
    import random

    from rowbus.workloads import w1_row

    sink_db = bench.database(bench.settings.resolved_sink, unique("bench_base"), W1_SINK_DDL)
    rng = random.Random(1)
    values = [w1_row(rng, k) for k in range(1, rows + 1)]
    marks = ", ".join(["%s"] * len(values[0]))
    sql = f"INSERT INTO `{sink_db}`.`w1` VALUES ({marks})"
    with bench.connect(bench.settings.resolved_sink, autocommit=False) as conn:
        started = time.perf_counter()
        with conn.cursor() as cur:
            for i in range(0, rows, 1000):
                cur.executemany(sql, values[i : i + 1000])
                if i % 20_000 == 19_000:
                    conn.commit()
        conn.commit()
        took = time.perf_counter() - started
    rate = rows / took
    print(f"baseline: {rows} W1 rows by bare multi-row INSERT in {took:.1f}s = {rate:,.0f} rows/s")
    return rate


def start_reader(
    bench: Bench,
    server: Any,
    name: str,
    upstream: str | list[str],
    schemas: str,
    checkpoints: str,
    workdir: str,
) -> Any:
    """``rowbus reader run`` for the database(s) `upstream` on `server`, publishing to the
    topic `name`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    cfg = Path(workdir) / "reader.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": bench.kafka["bootstrap.servers"]},
                "zookeeper": {"hosts": bench.settings.zookeeper.hosts},
                "sources": [
                    {
                        **server.plain(),  # address, account, TLS; a password file by name
                        "name": name,
                        "replicas": [],
                        "include_schemas": [],
                    }
                ],
                "reader": {
                    "start": "latest",
                    "include_schemas": [upstream] if isinstance(upstream, str) else upstream,
                    "topic_template": "{source}",
                    "checkpoints_topic": checkpoints,
                    "schemas_topic": schemas,
                    "flush_interval_s": 0.05,
                    "heartbeat_interval_s": 0.2,
                },
            }
        )
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    log = (Path(workdir) / "reader.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "rowbus", "-c", str(cfg), "reader", "run", "--source", name],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


class Visibility:
    """Polls the sink's highest W1 key in a thread: (time, max id) samples. `now()` is for
    the caller's thread only before `start()` (one connection)."""

    def __init__(self, conn: Any, table: str) -> None:
        self.conn, self.table = conn, table
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def now(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {self.table}")
            return int(cur.fetchone()[0])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seen.append((time.time(), self.now()))
            self._stop.wait(0.005)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def write_at_rate(
    up: Any, w1: Any, rate: int, seconds: float
) -> tuple[list[tuple[float, int]], float]:
    """W1 transactions paced to `rate` rows/s: (commit time, last key) of each, and the time
    the writing took."""
    commits: list[tuple[float, int]] = []
    interval = w1.rows_per_txn / rate
    t0 = time.monotonic()
    k = 0
    while time.monotonic() - t0 < seconds:
        pause = t0 + k * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        w1.step(up)
        commits.append((time.time(), w1.next_key - 1))
        k += 1
    return commits, time.monotonic() - t0


def lags_of(commits: list[tuple[float, int]], seen: list[tuple[float, int]]) -> list[float]:
    """For each (commit time, last key), the delay until the sink first showed that key."""
    lags = []
    i = 0
    for committed, key in commits:
        while i < len(seen) and seen[i][1] < key:
            i += 1
        if i == len(seen):
            break
        lags.append(max(0.0, seen[i][0] - committed))
    return sorted(lags)


def by_thirds(
    runs: list[tuple[list[tuple[float, int]], list[tuple[float, int]]]],
) -> tuple[str, bool]:
    """The median commit-to-visible lag of each third of the run (its commits in commit order,
    each with what its probe saw), as ``a -> b -> c``, and whether it grows: the last third's
    median clearly above the first's (half again and half a second), i.e. the job falls behind
    instead of holding a steady lag."""
    thirds: list[list[float]] = [[], [], []]
    for commits, seen in runs:
        n = len(commits)
        for j in range(3):
            thirds[j].extend(lags_of(commits[j * n // 3 : (j + 1) * n // 3], seen))
    medians = [statistics.median(t) if t else 0.0 for t in thirds]
    return " -> ".join(f"{m:.3f}s" for m in medians), medians[2] > medians[0] * 1.5 + 0.5


def bench_lag(  # noqa: PLR0915 - one scenario, read top to bottom
    bench: Bench, source_index: int, rate: int, seconds: float, workdir: str
) -> None:
    """A real reader, the running job, W1 at `rate` rows/s: commit-to-visible lag."""
    import signal

    from rowbus.spark_apply.job import spark_session, start_query
    from rowbus.workloads import W1

    server = bench.settings.sources[source_index]
    name = unique("bench.lag")
    bench.topic(name, bench.partitions)
    schemas = bench.topic(unique("bench.schemas"), 1)
    checkpoints = bench.topic(unique("bench.ckpt"), 1)
    upstream = bench.database(server, unique("bench_up"))
    w1 = W1(upstream)
    with bench.connect(server) as conn:
        w1.create(conn)
    sink_db = bench.database(bench.settings.resolved_sink, unique("bench_lag"), W1_SINK_DDL)
    reader = start_reader(bench, server, name, upstream, schemas, checkpoints, workdir)
    config = bench.job_config(
        unique("job"), [name], schemas, upstream, sink_db, f"{workdir}/lag-cp", available_now=False
    )
    spark = spark_session(config)
    applier = make_applier(bench, config)
    query = start_query(spark, config, applier)
    probe = Visibility(bench.connect(bench.settings.resolved_sink), f"`{sink_db}`.w1")
    ports = bench.cpu_ports(server)
    try:
        with bench.connect(server, autocommit=False) as up:
            deadline = time.monotonic() + 180
            while probe.now() == 0:  # warm up: the reader and the job both running
                if time.monotonic() > deadline or query.exception() is not None:
                    raise RuntimeError(f"no row visible in the sink: {query.exception()}")
                w1.step(up)
                time.sleep(1.0)
            while probe.now() < w1.next_key - 1:
                time.sleep(0.1)
            probe.start()
            before = CpuSample.take(*ports)
            commits, written = write_at_rate(up, w1, rate, seconds)
            spent = CpuSample.take(*ports).minus(before)
        limit = time.monotonic() + 120
        while probe.seen[-1][1] < commits[-1][1] and time.monotonic() < limit:
            time.sleep(0.1)
        probe.stop()
    finally:
        query.stop()
        applier.close()
        probe.conn.close()
        reader.send_signal(signal.SIGTERM)
        reader.wait(30)
    lags = lags_of(commits, probe.seen)
    if not lags:
        print("lag: nothing became visible")
        return

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    total = len(commits) * w1.rows_per_txn
    trend, grows = by_thirds([(commits, probe.seen)])
    # The driver's Python is this process: it also runs the writer.
    print(cores("lag (driver Python: the job's driver and the writer)", spent, written))
    print(
        f"lag [{bench.master}, {bench.mode}]: {total} rows at {total / written:,.0f} rows/s "
        f"offered ({rate} asked) for {written:.0f}s, {len(lags)}/{len(commits)} transactions "
        f"visible: commit-to-visible p50 {pct(0.5):.3f}s p99 {pct(0.99):.3f}s max "
        f"{lags[-1]:.3f}s; median by thirds {trend}: {'GROWING' if grows else 'not growing'}"
    )


def bench_lag_w2(  # noqa: PLR0915 - one scenario, read top to bottom
    bench: Bench, rate: int, seconds: float, workdir: str, writers: int = 2
) -> None:
    """W2 on two sources (`rate` row changes/s in all, single-row transactions, `writers`
    connections per source, each on a database of its own) through two real readers into
    the running job; commit-to-visible lag of the inserting transactions (a fifth of them:
    their key is new, so the probe sees when it lands), with the thirds of the run compared
    to tell whether lag grows."""
    import os
    import signal

    from rowbus.spark_apply.job import spark_session, start_query
    from rowbus.workloads import W2, W2_DDL

    servers = bench.settings.sources[:2]
    schemas = bench.topic(unique("bench.schemas"), 1)
    checkpoints = bench.topic(unique("bench.ckpt"), 1)
    names, readers = [], []
    loads: list[tuple[Any, Any]] = []  # (server, W2) per writer
    sink = bench.settings.resolved_sink
    for n, server in enumerate(servers):
        name = bench.topic(unique(f"bench.w2s{n}"), bench.partitions)
        upstreams = []
        for j in range(writers):
            upstream = bench.database(server, unique(f"bench_w2s{n}w{j}"))
            w2 = W2(upstream, seed=n * writers + j + 1, key_offset=(n * writers + j) * 10**9)
            with bench.connect(server, autocommit=False) as conn:
                w2.create(conn)
            bench.database(sink, upstream)
            with bench.connect(sink) as conn, conn.cursor() as cur:
                for table in w2.names():
                    cur.execute(W2_DDL.format(name=f"`{upstream}`.`{table}`"))
            upstreams.append(upstream)
            loads.append((server, w2))
        folder = f"{workdir}/reader{n}"
        os.makedirs(folder, exist_ok=True)
        readers.append(start_reader(bench, server, name, upstreams, schemas, checkpoints, folder))
        names.append(name)
    config = bench.job_config(
        unique("job"), names, schemas, "", "", f"{workdir}/lag2-cp", False, routes=False
    )
    config = config.model_copy(
        update={"apply": config.apply.model_copy(update={"state_database": unique("lag2_st")})}
    )
    bench.databases.append((sink, config.apply.state_database))
    spark = spark_session(config)
    applier = make_applier(bench, config)
    query = start_query(spark, config, applier)
    probes = [
        Visibility(
            bench.connect(sink),
            "(SELECT MAX(id) AS id FROM ("
            + " UNION ALL ".join(f"SELECT MAX(id) AS id FROM `{w.schema}`.`{t}`" for t in w.names())
            + ") AS m) AS v",
        )
        for _, w in loads
    ]
    results: list[list[tuple[float, int]]] = [[] for _ in loads]
    offered: list[float] = [0.0 for _ in loads]
    try:
        deadline = time.monotonic() + 240
        while any(p.now() < w.next_key - 1 for p, (_, w) in zip(probes, loads, strict=True)):
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"W2 rows never became visible: {query.exception()}")
            for server, w in loads:
                with bench.connect(server, autocommit=False) as up:
                    w.step(up)
            time.sleep(0.5)
        for p in probes:
            p.start()

        def write(i: int) -> None:
            server, w = loads[i]
            with bench.connect(server, autocommit=False) as up:
                interval = len(loads) / rate
                t0 = time.monotonic()
                k = 0
                while time.monotonic() - t0 < seconds:
                    pause = t0 + k * interval - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    before = w.next_key
                    w.step(up)
                    if w.next_key != before:
                        results[i].append((time.time(), w.next_key - 1))
                    k += 1
                offered[i] = k / (time.monotonic() - t0)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(len(loads))]
        ports, started = bench.cpu_ports(*servers), time.monotonic()
        before = CpuSample.take(*ports)
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)
        spent, wrote_for = CpuSample.take(*ports).minus(before), time.monotonic() - started
        limit = time.monotonic() + 180
        for p, commits in zip(probes, results, strict=True):
            while commits and p.seen[-1][1] < commits[-1][1] and time.monotonic() < limit:
                time.sleep(0.1)
        for p in probes:
            p.stop()
        progress = list(query.recentProgress)
    finally:
        query.stop()
        applier.close()
        for p in probes:
            p.conn.close()
        for r in readers:
            r.send_signal(signal.SIGTERM)
            r.wait(30)
    lags = sorted(
        x for p, commits in zip(probes, results, strict=True) for x in lags_of(commits, p.seen)
    )
    if not lags:
        print(f"lag2 at {rate}/s: nothing became visible")
        return

    def pct(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    trend, grows = by_thirds(
        [(commits, p.seen) for p, commits in zip(probes, results, strict=True)]
    )
    # The driver's Python is this process: it also runs the writers.
    print(cores("lag2 (driver Python: the job's driver and the writers)", spent, wrote_for))
    print(
        f"lag2 [{bench.master}, {bench.mode}] W2 x2 sources x{writers} writers: {rate} row "
        f"changes/s asked, {sum(offered):,.0f}/s offered for {seconds:.0f}s; {len(lags)} "
        f"inserting transactions visible: commit-to-visible p50 {pct(0.5):.3f}s p99 "
        f"{pct(0.99):.3f}s max {lags[-1]:.3f}s; median by thirds {trend}: "
        f"{'GROWING' if grows else 'not growing'}"
    )
    print_progress("lag2", progress)


def print_progress(part: str, progress: list[Any]) -> None:
    """Structured Streaming's own timings per micro-batch (the query's progress): the first
    batch, and the median of the others, split into the foreachBatch (`addBatch`: collect,
    decode, plan, write) and the fixed rest (offsets, planning, offset and commit logs)."""
    rows = []
    parts: dict[str, list[int]] = {}
    for prog in progress:
        d = prog.durationMs if hasattr(prog, "durationMs") else prog["durationMs"]
        n = prog.numInputRows if hasattr(prog, "numInputRows") else prog["numInputRows"]
        total, add = d.get("triggerExecution", 0), d.get("addBatch", 0)
        if n:
            rows.append((n, total, add))
            if len(rows) > 1:
                for k, v in d.items():
                    parts.setdefault(k, []).append(v)
    if not rows:
        return
    first, rest = rows[0], rows[1:]
    text = (
        f"{part} batches: first {first[0]} records {first[1] / 1000:.2f}s "
        f"(foreachBatch {first[2] / 1000:.2f}s)"
    )
    if rest:
        text += (
            f"; next {len(rest)}: median {statistics.median(r[0] for r in rest):,.0f} records, "
            f"{statistics.median(r[1] for r in rest) / 1000:.2f}s a batch, of which fixed "
            f"(not foreachBatch) {statistics.median(r[1] - r[2] for r in rest) / 1000:.3f}s ("
            + ", ".join(
                f"{k} {statistics.median(v) / 1000:.3f}s"
                for k, v in sorted(parts.items())
                if k not in ("triggerExecution", "addBatch")
            )
            + ")"
        )
    print(text)


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - argument wiring
    import argparse
    import contextlib
    import logging
    import os
    import sys
    import tempfile
    from pathlib import Path

    from rowbus.config import load_settings

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.apply",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-c",
        "--config",
        default=None,
        help="rowbus configuration (default: the `rowbus local up` stack)",
    )
    parser.add_argument(
        "--only", choices=["path", "baseline", "apply", "lag", "lag2"], action="append"
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master of the job; several, comma-separated, for the apply part "
        "(e.g. local[2],local[1]: each against the same run's baseline)",
    )
    parser.add_argument("--cluster", type=int, default=0, help="a standalone cluster of N workers")
    parser.add_argument(
        "--mode",
        default="snapshot",
        help="apply.mode of the job: snapshot, parallel or throughput; several, "
        "comma-separated, run one after the other against the same baseline "
        "(e.g. snapshot,throughput)",
    )
    parser.add_argument(
        "--parallelism",
        "--tasks",
        default="2",
        help="writing tasks of parallel and throughput modes (apply.parallelism); several, "
        "comma-separated (e.g. 1,2,4), run one after the other on the same published rows",
    )
    parser.add_argument(
        "--warm-batches",
        type=int,
        default=None,
        help="apply part: batches left out of the steady window: a fresh JVM's CPU per batch "
        "fell until about the 8th batch of 50k offsets (C2 compiling Spark's per-job "
        "machinery; the per-batch lines show it), so 7 by default (1 with --rows given, "
        "as before: a short run has no 8th batch)",
    )
    parser.add_argument(
        "--sink-rtt-ms",
        type=float,
        default=0.0,
        help="apply part: the job reaches the sink through a proxy adding this round trip "
        "to every connection",
    )
    parser.add_argument(
        "--sink-kbps",
        type=float,
        default=0.0,
        help="apply part: that proxy's byte rate per connection and direction, KB/s",
    )
    parser.add_argument(
        "--driver-writes", action="store_true", help="parallel mode: shards on driver threads"
    )
    parser.add_argument(
        "--overlap",
        choices=["on", "off", "both"],
        default="on",
        help="apply part: write a batch while the next is read (apply.overlap_batches); "
        "both: off, then on, in one run",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=0,
        help="W1 rows for path, baseline and apply (default: enough for the warm and the "
        "steady batches at --max-per-trigger; noida-db holds ~1 KB a record in memory)",
    )
    parser.add_argument(
        "--steady-batches",
        type=int,
        default=10,
        help="apply part: full batches the steady window should hold after the warm ones "
        "(sizes the default --rows)",
    )
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        default=None,
        help="the job's apply.max_offsets_per_trigger (default: each mode's own)",
    )
    parser.add_argument("--rate", type=int, default=5000, help="upstream rows/s for lag")
    parser.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="sustained window of lag and lag2 (300 for the note)",
    )
    parser.add_argument(
        "--writers", type=int, default=2, help="lag2: writer connections per source"
    )
    parser.add_argument("--source", type=int, default=0, help="index of the source for lag")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the path part, and the driver's micro-batches of the others",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for name in ("rowbus.spark_apply.job", "rowbus.spark_apply.owned"):
        logging.getLogger(name).setLevel(logging.INFO)  # per-batch phase timings
    settings = load_settings(Path(args.config) if args.config else None)
    parts = args.only or ["path", "baseline", "apply", "lag"]
    bench = Bench(settings, args.partitions, args.max_per_trigger)
    masters = [m.strip() for m in args.master.split(",") if m.strip()]
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    tasks = [int(n) for n in str(args.parallelism).split(",") if n.strip()]
    bench.master, bench.mode, bench.parallelism = masters[0], modes[0], tasks[0]
    bench.executor_writes = not args.driver_writes
    warm = args.warm_batches if args.warm_batches is not None else (1 if args.rows else 7)
    bench.warm_batches = max(1, warm)
    bench.steady_batches = max(1, args.steady_batches)
    # Sized for the mode with the largest batch, so each has its steady batches.
    per_trigger = args.max_per_trigger or max(_mode_batch(m) for m in modes)
    rows = args.rows or sized_rows(per_trigger, args.partitions, bench)
    if args.profile:
        import cProfile

        bench.profile = cProfile.Profile()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="rowbus-bench-") as tmp,
            contextlib.ExitStack() as stack,
        ):
            if args.cluster:
                import signal

                from rowbus.testing.spark_cluster import PORT_BASE, spark_cluster, spark_env

                # A TERM (e.g. from `timeout`) unwinds, so the cluster is stopped by pid.
                signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

                os.environ.update(spark_env())  # the driver JVM of this process: loopback too
                cluster = stack.enter_context(
                    # Ports apart from the e2e test's cluster (PORT_BASE + 50).
                    spark_cluster(
                        Path(tmp) / "spark", workers=args.cluster, memory="1g", port=PORT_BASE + 50
                    )
                )
                bench.master = f"{cluster.url} ({args.cluster} worker(s))"
            if "path" in parts:
                bench_path(bench, min(rows, 100_000), args.profile)
            baseline = bench_baseline(bench, rows) if "baseline" in parts else None
            if "apply" in parts:
                if args.sink_rtt_ms or args.sink_kbps:
                    throttled = ThrottledSink(
                        settings.resolved_sink, args.sink_rtt_ms, args.sink_kbps
                    )
                    stack.callback(throttled.close)
                    bench.job_sink = throttled.sink
                published = publish_w1(bench, rows)
                overlaps = {"on": [True], "off": [False], "both": [False, True]}[args.overlap]
                runs = [
                    (m, o, mode, n)
                    for m in masters
                    for o in overlaps
                    for mode in modes
                    for n in (tasks if mode != "snapshot" else tasks[:1])
                ]
                references: dict[tuple[str, bool, str], Applied] = {}
                lines = []
                for index, (master, overlap, mode, n) in enumerate(runs):
                    if not args.cluster:
                        bench.master = master
                    bench.overlap, bench.mode, bench.parallelism = overlap, mode, n
                    load = Path("/proc/loadavg").read_text().split()[:3]
                    applied = bench_apply(bench, published, tmp, baseline)
                    after = Path("/proc/loadavg").read_text().split()[:3]
                    reference = references.setdefault((master, overlap, mode), applied)
                    lines.append(
                        f"{scale_line(bench, applied, reference)}; load {'/'.join(load)} "
                        f"-> {'/'.join(after)}"
                    )
                    print(lines[-1])
                    last_of_master = index + 1 == len(runs) or runs[index + 1][0] != master
                    if len(masters) > 1 and last_of_master:  # the next master: a new session
                        from pyspark.sql import SparkSession

                        active = SparkSession.getActiveSession()
                        if active is not None:
                            active.stop()
                if len(lines) > 1:
                    print("\n".join(["all configurations of this run:", *lines]))
            if "lag" in parts:
                bench_lag(bench, args.source, args.rate, args.seconds, tmp)
            if "lag2" in parts:
                bench_lag_w2(bench, args.rate, args.seconds, tmp, args.writers)
        print_profile(bench)
    finally:
        bench.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
