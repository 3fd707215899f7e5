"""`rowbus demo`: the whole platform on the embedded stack, as a new user first meets it.

Steps: bring the stack up and check it (doctor); create the workload tables on both sources and
their targets on the sink; start a reader per source and the Spark apply job; write W2 (each
source its own schema) and a W3 shard group (2 sources x 4 shards -> one target, three DDLs on
every shard at different moments) for a while, probing commit-to-visible lag; wait until the
sink has caught up (verify reports equality); print a summary; stop the readers and the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pymysql
import yaml

from rowbus.clients import mysql
from rowbus.config import MySQLSettings, Settings
from rowbus.demo_iceberg import IcebergDemo, IcebergResult
from rowbus.exceptions import WaitTimeoutError
from rowbus.local.procs import ProcessRecord, check_children, launch, stop_all
from rowbus.local.stack import LocalStack
from rowbus.protocol.errors import RowbusError
from rowbus.verify import TableDiff, verify
from rowbus.waiting import wait_for
from rowbus.workloads import W2, W3, W3_DDLS, Bulk

Workload = W2 | W3 | Bulk
TOPIC_FAMILY = "rowbus.demo-"
"""Every demo run's topics begin so (then the run's time): a run deletes earlier runs'."""

DEMO_PARTITIONS = 4
W3_TARGET = "demo_w3.orders"


log = logging.getLogger(__name__)


@dataclass
class DemoOptions:
    seconds: float = 45.0
    w2_rate: float = 300.0
    """W2 transactions per second per source."""
    w3_rate: float = 60.0
    """W3 transactions per second per source."""
    bulk_rate: float = 12_000.0
    """Bulk row changes per second (`rowbus.workloads.Bulk`), on the second source: the
    pipeline at speed, next to W2's and W3's statement rates. Not on the first, whose topic
    the Iceberg part reads whole."""
    catch_up_timeout: float = 600.0
    iceberg: bool = True
    """Then apply the first source's W2 tables into Iceberg too (`rowbus.demo_iceberg`)."""


@dataclass
class Probe:
    """Commit-to-visible lag: ids committed upstream (with their commit time) seen in the sink."""

    committed: dict[tuple[str, int], float] = field(default_factory=dict)
    lags_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen_all: threading.Event = field(default_factory=threading.Event)
    """Set once the writers stopped and every committed id is in the sink."""

    def percentile(self, p: float) -> float | None:
        with self.lock:
            data = sorted(self.lags_ms)
        if not data:
            return None
        return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]

    def watch(
        self, sink_server: MySQLSettings, written: threading.Event, done: threading.Event
    ) -> None:
        """Poll the sink's ``lag_probe`` tables for committed ids and record each one's lag,
        until every id committed is seen once `written` is set, or until `done`."""
        sink = _connect(sink_server)
        seen: dict[str, int] = {}
        try:
            while True:
                with self.lock:
                    pending = {schema for schema, _ in self.committed}
                for schema in pending:
                    with sink.cursor() as cur:
                        try:
                            cur.execute(
                                f"SELECT id FROM `{schema}`.lag_probe WHERE id > %s",
                                (seen.get(schema, 0),),
                            )
                        except pymysql.MySQLError:
                            continue
                        ids = [int(r[0]) for r in cur.fetchall()]
                    sink.commit()
                    now = time.monotonic()
                    with self.lock:
                        for i in ids:
                            at = self.committed.get((schema, i))
                            if at is not None:
                                self.lags_ms.append((now - at) * 1000)
                    if ids:
                        seen[schema] = max(ids)
                if written.is_set() and len(self.lags_ms) >= len(self.committed):
                    self.seen_all.set()
                    return
                if done.wait(0.05):
                    return
        finally:
            sink.close()


class Demo:
    def __init__(self, settings: Settings, options: DemoOptions, out: TextIO = sys.stdout) -> None:
        self.settings = settings
        self.options = options
        self.out = out
        self.home = settings.local.state_dir.resolve() / "demo"
        self.records: list[ProcessRecord] = []
        self.stop_writing = threading.Event()
        self.changes = 0
        self.changes_lock = threading.Lock()
        self.probe = Probe()
        self.topic_template = settings.reader.topic_template
        self.startup_s = 0.0
        self.written_s = 1.0
        self.writer_errors: list[str] = []
        self._probe_done = threading.Event()
        self.config_path = self.home / "rowbus-demo.yaml"
        self.began = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.began:6.1f}s] {text}", file=self.out, flush=True)

    def run(self) -> int:
        from rowbus.doctor import run_doctor

        self.say("bringing up the embedded stack (installs what is missing)")
        report = LocalStack(self.settings).up()
        self.say(f"stack up: started {report.started or 'nothing'} in {report.seconds:.1f}s")
        if run_doctor(self.settings, out=self.out) != 0:
            raise RowbusError("the doctor found a guarantee missing; see above")
        config = self._write_config()
        from rowbus.config import load_settings

        # From here on the demo's own configuration (its topics and routes) is the truth.
        self.settings = load_settings(config)
        workloads = self._create_tables()
        try:
            self._start_readers(config)
            self._start_apply(config)
            first_write = time.monotonic()
            self._write(workloads)
            for w in workloads:
                if isinstance(w[1], W3):
                    w[1].finish_ddls(w[0])
            self.say(f"writers stopped after {self.changes:,} row changes; waiting for the sink")
            diffs = self._catch_up()
            elapsed = time.monotonic() - first_write
            iceberg = None
            if self.options.iceberg and diffs and all(d.equal for d in diffs):
                # The MySQL part's readers and job are done: their cores go to the next job.
                self._stop_processes()
                self.records.clear()
                iceberg = IcebergDemo(
                    self.config_path, self.home, self._launch, self.say, self.out
                ).run(sys.executable)
            return self._summary(diffs, elapsed, iceberg)
        finally:
            self._stop_processes()
            for conn, _ in workloads:
                conn.close()

    def _write_config(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        for old in self.home.glob("*.log"):
            old.unlink()
        data = json.loads(self.settings.model_dump_json())
        for section in ("local",):
            data.pop(section, None)
        data["sources"] = [source.plain() for source in self.settings.sources]
        data["sink"] = self.settings.resolved_sink.plain()
        # Each run has its own topics and coordination state, so running the demo again starts
        # clean instead of replaying earlier runs.
        run = time.strftime("%Y%m%d%H%M%S")
        prefix = f"{TOPIC_FAMILY}{run}"
        self.topic_template = prefix + ".{source}"
        data["reader"] = {
            **data["reader"],
            "start": "latest",
            "include_schemas": ["demo_*"],
            "heartbeat_interval_s": 0.5,
            "topic_template": self.topic_template,
            "checkpoints_topic": f"{prefix}.checkpoints",
            "schemas_topic": f"{prefix}.schemas",
        }
        data["apply"] = {
            **data["apply"],
            "job": "rowbus-demo",
            "topic_template": self.topic_template,
            "schemas_topic": f"{prefix}.schemas",
            "checkpoint_location": str(self.home / f"spark-checkpoint-{run}"),
            "routes": [{"match": "demo_w3_*.orders_*", "target": W3_TARGET, "sharded": True}],
            "shard_ddl": {"control_topic": f"{prefix}.control", "election": f"demo-{run}"},
        }
        data["subscriber"] = {
            **data["subscriber"],
            "topic_template": self.topic_template,
            "checkpoints_topic": f"{prefix}.checkpoints",
            "schemas_topic": f"{prefix}.schemas",
        }
        path = self.home / "rowbus-demo.yaml"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        self.config_path = path
        self._create_topics(prefix)
        return path

    def _create_topics(self, prefix: str) -> None:
        """The demo's topics, created before anything asks for them (a broker would otherwise
        auto-create them with one partition): several partitions per source, so the merge by
        watermark across partitions is what the demo shows."""
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        from rowbus.clients import kafka
        from rowbus.protocol.topics import (
            CHECKPOINTS_TOPIC_CONFIG,
            CONTROL_TOPIC_CONFIG,
            DATA_TOPIC_CONFIG,
            SCHEMAS_TOPIC_CONFIG,
        )

        wanted = [
            NewTopic(
                self.topic_template.format(source=s.name),
                DEMO_PARTITIONS,
                1,
                config=dict(DATA_TOPIC_CONFIG),
            )
            for s in self.settings.sources[:2]
        ] + [
            NewTopic(f"{prefix}.checkpoints", 1, 1, config=dict(CHECKPOINTS_TOPIC_CONFIG)),
            NewTopic(f"{prefix}.schemas", 1, 1, config=dict(SCHEMAS_TOPIC_CONFIG)),
            NewTopic(f"{prefix}.control", 1, 1, config=dict(CONTROL_TOPIC_CONFIG)),
        ]
        admin = kafka.admin(self.settings.kafka.client_config())
        delete_earlier_runs(admin)
        for topic, future in admin.create_topics(wanted, operation_timeout=30).items():
            future.result(30)
            log.info("created topic %s", topic)

    def _create_tables(self) -> list[tuple[pymysql.connections.Connection[Any], Workload]]:
        sink = _connect(self.settings.resolved_sink)
        workloads: list[tuple[pymysql.connections.Connection[Any], Workload]] = []
        with sink.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS demo_w3")
            cur.execute("CREATE DATABASE demo_w3")
            cur.execute("DROP DATABASE IF EXISTS rowbus_apply")
            cur.execute("DROP DATABASE IF EXISTS rowbus_shard_ddl")
        for index, source in enumerate(self.settings.sources[:2]):
            conn = _connect(source)
            w2 = W2(f"demo_w2_{source.name}", seed=10 + index, initial_rows=0)
            w3 = W3(
                f"demo_w3_{source.name}", index, steps_between_ddls=int(self.options.w3_rate * 8)
            )
            bulk = Bulk(f"demo_bulk_{source.name}")
            for schema in (w2.schema, w3.schema, bulk.schema):
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
                with sink.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
            w2.create(conn)
            w3.create(conn)
            _copy_tables(conn, sink, w2.schema, w2.names(), w2.schema)
            if index == 1:
                bulk.create(conn)
                _copy_tables(conn, sink, bulk.schema, bulk.names(), bulk.schema)
            if index == 0:
                _copy_tables(conn, sink, w3.schema, ["orders_0"], "demo_w3", rename="orders")
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE `{w2.schema}`.lag_probe (id BIGINT PRIMARY KEY, at DOUBLE)"
                )
            _copy_tables(conn, sink, w2.schema, ["lag_probe"], w2.schema)
            conn.commit()
            workloads += [(conn, w2), (_connect(source), w3)]
            if index == 1:
                workloads.append((_connect(source), bulk))
        sink.close()
        self.say(
            "created W2 (8 tables per source), the W3 shard group (2 x 4 shards) and a bulk "
            f"table on {self.settings.sources[1].name}"
        )
        return workloads

    def _launch(self, name: str, args: list[str], secrets: dict[str, str] | None = None) -> int:
        env = {"PYSPARK_PYTHON": sys.executable, **(secrets or {})}
        pid = launch(args, self.home / f"{name}.log", env=env)
        self.records.append(ProcessRecord(name, pid, args[-1], "-"))
        return pid

    def _start_readers(self, config: Path) -> None:
        from confluent_kafka import TopicPartition

        from rowbus.clients import kafka

        for source in self.settings.sources[:2]:
            self._launch(
                f"reader-{source.name}",
                [
                    sys.executable,
                    "-m",
                    "rowbus",
                    "-c",
                    str(config),
                    "reader",
                    "run",
                    "--source",
                    source.name,
                ],
            )
        for source in self.settings.sources[:2]:
            topic = self.topic_template.format(source=source.name)

            def publishing(topic: str = topic) -> bool:
                self._check_alive()
                # A fresh client each time: one created before the topic caches it as unknown.
                consumer = kafka.consumer(self.settings.kafka.client_config(**{"group.id": "demo"}))
                try:
                    tp = TopicPartition(topic, 0)
                    return bool(consumer.get_watermark_offsets(tp, timeout=2, cached=False)[1] > 0)
                finally:
                    consumer.close()

            wait_for(
                publishing,
                timeout=60,
                what=f"the reader of {source.name} to publish",
                stop_on=(RowbusError,),
            )
        self.say("readers are publishing (one per source, leader elected in ZooKeeper)")

    def _start_apply(self, config: Path) -> None:
        from rowbus.jobs import job_config, write_job

        job = str(self.home / "apply-job.json")
        env = write_job(Path(job), job_config(self.settings))
        self._launch("apply", [sys.executable, "-m", "rowbus.spark_apply", "--config", job], env)
        self.say("Spark apply job starting (local[2]; the first batch takes 10-60 s)")
        from rowbus.status import apply_status

        began = time.monotonic()

        def first_batch() -> bool:
            self._check_alive()
            return any(j.job == self.settings.apply.job for j in apply_status(self.settings))

        # Lag is measured in steady state: Spark's start-up is reported on its own line.
        wait_for(
            first_batch,
            timeout=300,
            what="the apply job's first committed batch",
            interval=1.0,
            stop_on=(RowbusError,),
        )
        self.startup_s = time.monotonic() - began
        self.say(f"apply job committed its first batch after {self.startup_s:.1f}s")

    def _check_alive(self) -> None:
        check_children(self.records, self.home)

    def _write(self, workloads: list[tuple[pymysql.connections.Connection[Any], Workload]]) -> None:
        threads = []
        began = time.monotonic()
        for conn, workload in workloads:
            rate = _step_rate(workload, self.options)
            if rate <= 0:
                continue
            threads.append(
                threading.Thread(target=self._writer, args=(conn, workload, rate), daemon=True)
            )
        sink_probe = threading.Thread(
            target=self.probe.watch,
            args=(self.settings.resolved_sink, self.stop_writing, self._probe_done),
            daemon=True,
        )
        for t in [*threads, sink_probe]:
            t.start()
        deadline = time.monotonic() + self.options.seconds
        while not self.stop_writing.wait(min(5.0, max(0.0, deadline - time.monotonic()))):
            self._check_alive()
            p50 = self.probe.percentile(50)
            lag = f"; lag p50 {p50:.0f} ms" if p50 is not None else ""
            self.say(f"written {self.changes:,} row changes{lag}")
            if time.monotonic() >= deadline:
                self.stop_writing.set()
        for t in threads:
            t.join(timeout=30)
        self.written_s = time.monotonic() - began
        if self.writer_errors:
            raise RowbusError(self.writer_errors[0])

    def _writer(
        self, conn: pymysql.connections.Connection[Any], workload: Workload, rate: float
    ) -> None:
        try:
            self._paced(conn, workload, rate)
        except pymysql.MySQLError as exc:
            # The demo stops on it (`_write`): a writer gone quiet would still end "equal".
            self.writer_errors.append(f"the writer of {workload.schema} failed: {exc}")
            self.stop_writing.set()

    def _paced(
        self, conn: pymysql.connections.Connection[Any], workload: Workload, rate: float
    ) -> None:
        interval = 1.0 / rate
        next_at = time.monotonic()
        probe_every = max(1, int(rate / 10))
        step = 0
        while not self.stop_writing.is_set():
            changed = workload.step(conn)
            step += 1
            if isinstance(workload, W2) and step % probe_every == 0:
                with conn.cursor() as cur:
                    cur.execute(
                        f"INSERT INTO `{workload.schema}`.lag_probe VALUES (%s, 0)", (step,)
                    )
                conn.commit()
                with self.probe.lock:
                    self.probe.committed[(workload.schema, step)] = time.monotonic()
                changed += 1
            with self.changes_lock:
                self.changes += changed
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stop_writing.wait(delay)

    def _catch_up(self) -> list[TableDiff]:
        try:
            return catch_up(
                self.settings,
                self.probe,
                self._check_alive,
                self.say,
                self.options.catch_up_timeout,
            )
        finally:
            self._probe_done.set()

    def _summary(
        self, diffs: list[TableDiff], elapsed: float, iceberg: IcebergResult | None = None
    ) -> int:
        equal = bool(diffs) and all(d.equal for d in diffs)
        differences = sum(d.differences for d in diffs)
        p50, p99 = self.probe.percentile(50), self.probe.percentile(99)
        target = _columns(self.settings.resolved_sink, W3_TARGET)
        ddls = sum(
            (
                "note" in target,
                target.get("amount", "").startswith("decimal(14"),
                "priority" in target,
            )
        )
        verdict = "0 differences" if equal else f"{differences} differences"
        probes = len(self.probe.lags_ms)
        lines = [
            "",
            "rowbus demo summary",
            f"  row changes replicated : {self.changes:,} "
            f"(W2 on 2 sources, a bulk table, W3 2x4 shards -> {W3_TARGET})",
            f"  written upstream       : {self.changes / self.written_s:,.0f} row changes/s "
            f"for {self.written_s:.0f}s",
            f"  throughput             : {self.changes / elapsed:,.0f} row changes/s "
            "(first write to verified)",
            f"  commit-to-visible lag  : p50 {_ms(p50)}, p99 {_ms(p99)} ({probes} probes)",
            f"  apply job start-up     : {self.startup_s:.1f}s to its first committed batch",
            f"  shard DDLs applied     : {ddls} of {len(W3_DDLS)} on {W3_TARGET}",
            f"  verify                 : {verdict} across {len(diffs)} tables",
            f"  topics                 : {DEMO_PARTITIONS} partitions per source "
            f"({self.topic_template})",
            *_iceberg_lines(iceberg),
            "",
            *_next_steps(
                self.config_path,
                [self.topic_template.format(source=s.name) for s in self.settings.sources[:2]],
                iceberg,
            ),
        ]
        print("\n".join(lines), file=self.out)
        iceberg_ok = not self.options.iceberg or (iceberg is not None and iceberg.equal)
        return 0 if equal and ddls == len(W3_DDLS) and iceberg_ok else 1

    def _stop_processes(self) -> None:
        stop_all(list(reversed(self.records)), signal.SIGTERM, grace=30)


def catch_up(
    settings: Settings,
    probe: Probe,
    check_alive: Callable[[], None],
    say: Callable[[str], None],
    timeout: float,
) -> list[TableDiff]:
    """Waits until `rowbus verify` finds the sink equal to the sources (at most `timeout`
    seconds) and returns its last answer; says why when it did not catch up."""
    last: list[TableDiff] = []

    def equal() -> bool:
        nonlocal last
        check_alive()
        last = verify(settings, schemas=["demo_*"])
        missing = sum(d.source_rows - d.target_rows for d in last)
        differing = sum(not d.equal for d in last)
        say(f"sink: {missing:,} row(s) still missing, {differing} table(s) differ")
        return all(d.equal for d in last)

    def probes_seen() -> bool:
        check_alive()
        return probe.seen_all.is_set()

    # The job releases in watermark order, so once the last probe (committed within a tenth
    # of a second of the writers' end) is in the sink, nearly everything is: wait for that
    # first, on the probe's one indexed query per 50 ms. A verify while the sink is far behind
    # fetches each differing chunk row by row: CPU the catching-up job needs here.
    deadline = time.monotonic() + timeout
    try:
        with contextlib.suppress(WaitTimeoutError):
            wait_for(
                probes_seen,
                timeout=timeout,
                what="the sink to show every probe",
                interval=0.2,
                stop_on=(RowbusError,),
            )
        wait_for(
            equal,
            timeout=max(1.0, deadline - time.monotonic()),
            what="the sink to equal the sources",
            interval=1.0,
            stop_on=(RowbusError,),
        )
    except RowbusError as exc:
        say(f"the sink did not catch up: {exc}")
    return last


def delete_earlier_runs(admin: Any) -> list[str]:
    """Deletes the topics of earlier demo runs (`TOPIC_FAMILY`) and returns their names: nothing
    reads them once a new run has begun, and the local broker holds every record in memory and
    rewrites all of it to one file as it changes (its "autosave" thread: ~90% of a core through
    a demo after six earlier runs, which replicated 5,750-6,654 row changes/s against
    9,546-10,815 without them; 2026-11-27)."""
    earlier = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(TOPIC_FAMILY))
    if earlier:
        for topic, future in admin.delete_topics(earlier, operation_timeout=30).items():
            future.result(30)
            log.info("deleted topic %s of an earlier demo run", topic)
    return earlier


def _step_rate(workload: Workload, options: DemoOptions) -> float:
    """Steps per second a workload's writer is paced at."""
    if isinstance(workload, Bulk):
        return options.bulk_rate / (1.6 * workload.rows_per_txn)
    return options.w2_rate if isinstance(workload, W2) else options.w3_rate


def _next_steps(config: Path, topics: list[str], iceberg: IcebergResult | None) -> list[str]:
    return [
        f"The demo's configuration is {config}; the stack stays up. Next:",
        f"  rowbus -c {config} status",
        f"  rowbus -c {config} verify --schema 'demo_*'",
        f"  rowbus -c {config} tail {' '.join(topics)} --from earliest --max-transactions 5",
        *([] if iceberg is None else [f"  rowbus -c {iceberg.config} verify --schema 'demo_w2_*'"]),
        "  rowbus local down",
    ]


def _iceberg_lines(iceberg: IcebergResult | None) -> list[str]:
    if iceberg is None:
        return []
    differences = sum(d.differences for d in iceberg.diffs)
    events = sum(iceberg.ops.values())
    return [
        f"  Iceberg (2nd job)      : {events:,} change-log events, current state of "
        f"{len(iceberg.diffs)} tables, {iceberg.job_s:.1f}s",
        f"  Iceberg verify         : {differences} differences across {len(iceberg.diffs)} tables",
    ]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def _connect(server: MySQLSettings) -> pymysql.connections.Connection[Any]:
    return mysql.connect(
        server,
        autocommit=False,
        connect_timeout=10,
    )


def _copy_tables(
    src: pymysql.connections.Connection[Any],
    dst: pymysql.connections.Connection[Any],
    schema: str,
    tables: list[str],
    target_schema: str,
    rename: str | None = None,
) -> None:
    with dst.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{target_schema}`")
    for table in tables:
        with src.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE `{schema}`.`{table}`")
            row = cur.fetchone()
            assert row is not None
            ddl = str(row[1])
        ddl = ddl.replace(
            f"CREATE TABLE `{table}`", f"CREATE TABLE `{target_schema}`.`{rename or table}`", 1
        )
        with dst.cursor() as cur:
            cur.execute(ddl)


def _columns(server: MySQLSettings, qualified: str) -> dict[str, str]:
    schema, table = qualified.split(".")
    with _connect(server) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        return {str(n): str(t) for n, t in cur.fetchall()}


def run_demo(settings: Settings, options: DemoOptions) -> int:
    def _exit(signum: int, _frame: object) -> None:
        # Unwinds through `Demo.run`'s finally, which stops the processes it started (they
        # run in sessions of their own: nothing else would).
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        return Demo(settings, options).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
