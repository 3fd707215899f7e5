"""The apply job in a real Spark session, from Kafka to the sink: two sources of W2 traffic, a
DDL mid-stream, and a concurrent reader checking that snapshot mode never shows part of an
upstream transaction."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op, TableSchema
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, spark_session, start_query
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.spark_apply.harness import COLUMNS, SINK_DDL, Model, Publisher

PARTITIONS = 3
TXNS = 120


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def shared_spark() -> Any:
    """The process's SparkSession (getOrCreate), shared by the Spark test modules and never
    stopped by one: starting a session costs 11-22 s here. Its JVM ends with the process."""
    return spark_session(
        JobConfig(apply=ApplySettings(spark_conf={"spark.sql.streaming.stopTimeout": "30s"}))
    )


def job_config(
    services: Settings,
    job: str,
    topics: list[str],
    schemas_topic: str,
    routes: list[RouteSettings],
    checkpoint: Path,
    **apply: Any,
) -> JobConfig:
    s = services.resolved_sink
    return JobConfig(
        apply=ApplySettings(
            job=job,
            sources=tuple(topics),
            topic_template="{source}",
            schemas_topic=schemas_topic,
            routes=tuple(routes),
            checkpoint_location=checkpoint,
            state_database=f"state_{job}",
            **{"unrouted": "error", **apply},
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=s.host, port=s.port, user=s.user, password=s.password),
    )


def sink_rows(services: Settings, db: str, table: str) -> dict[int, tuple[Any, ...]]:
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        return {r[0]: tuple(r) for r in cur.fetchall()}


def test_two_sources_w2_with_ddl_and_snapshot_consistency(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topics = [make_topic("src1", PARTITIONS), make_topic("src2", PARTITIONS)]
    schemas_topic = make_topic("schemas", 1)
    upstream = [unique("up1"), unique("up2")]
    sinks = [make_database(services.resolved_sink), make_database(services.resolved_sink)]
    models = [Model(upstream[0], seed=1), Model(upstream[1], seed=2)]
    pair = TableSchema(upstream[0], "pair", COLUMNS, ("id",))
    kafka = services.kafka.client_config()
    pubs = [Publisher(kafka, t, schemas_topic, t, PARTITIONS) for t in topics]
    for pub, model in zip(pubs, models, strict=True):
        pub.schemas([*model.table_schemas.values(), pair])
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for db in sinks:
            for name in [*models[0].table_schemas, "pair"]:
                cur.execute(SINK_DDL.format(db=db, table=name))
    job = unique("job")
    config = job_config(
        services,
        job,
        topics,
        schemas_topic,
        [
            RouteSettings(match=f"{u}.*", target=f"{d}.{{table}}")
            for u, d in zip(upstream, sinks, strict=True)
        ],
        tmp_path / "cp",
        max_offsets_per_trigger=1000,
    )
    applier = BatchApplier(config).start()
    query = start_query(spark, config, applier)

    violations: list[tuple[Any, ...]] = []
    observed = [0]
    stop = threading.Event()

    def reader() -> None:
        with connect(services.resolved_sink, sinks[0], autocommit=False) as conn:
            while not stop.is_set():
                with conn.cursor() as cur:
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                    cur.execute("SELECT id, qty FROM pair ORDER BY id")
                    rows = cur.fetchall()
                conn.commit()
                if len(rows) == 2:
                    observed[0] += 1
                    if rows[0][1] + rows[1][1] != 0:
                        violations.append(rows)

    checker = threading.Thread(target=reader, daemon=True)
    checker.start()
    try:
        pair_rows = {1: (1, 0, "a", None, None), 2: (2, 0, "b", None, None)}
        pubs[0].txn([(Op.INSERT, pair, None, pair_rows[1]), (Op.INSERT, pair, None, pair_rows[2])])
        for i in range(TXNS):
            for pub, model in zip(pubs, models, strict=True):
                pub.txn([model.step()])
            if i % 5 == 0:  # one upstream transaction over both rows: qty1 + qty2 == 0
                new = {1: (1, i + 1, "a", None, None), 2: (2, -(i + 1), "b", None, None)}
                pubs[0].txn([(Op.UPDATE, pair, pair_rows[k], new[k]) for k in (1, 2)])
                pair_rows = new
            if i == TXNS // 2:
                pubs[0].txn([], ddl=models[0].alter_add_note("t0"))
        for pub in pubs:  # an idle reader's heartbeat: both sources are resolved past the end
            pub.txn([])
            pub.close()

        def caught_up() -> bool:
            return (
                all(
                    sink_rows(services, db, name) == model.rows[name]
                    for db, model in zip(sinks, models, strict=True)
                    for name in model.rows
                )
                and sink_rows(services, sinks[0], "pair")[1][1] == pair_rows[1][1]
            )

        wait_for(
            lambda: caught_up() or query.exception(),
            timeout=120,
            what="the sink to equal both upstream models",
        )
        assert query.exception() is None, query.exception()
    finally:
        stop.set()
        checker.join(10)
        query.stop()
        applier.close()
    assert observed[0] > 0
    assert violations == []
    with connect(services.resolved_sink, f"state_{job}") as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT batch_id, step, shard) FROM apply_checkpoint")
        total, distinct = cur.fetchone()
        assert total == distinct > 1
        cur.execute("SELECT COUNT(*) FROM apply_checkpoint WHERE ddl LIKE 'ALTER TABLE%'")
        assert cur.fetchone()[0] == 1


def test_a_local_session_binds_loopback(spark: Any) -> None:
    """Every session of ours (the job, the benchmarks, these tests) binds the driver and its
    block manager to loopback, not the machine's first interface (issue #33)."""
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"


class _FailsWhileStopped(BatchApplier):
    """A batch that fails as the lag benchmark's did (issue #33): while the query is being
    stopped, with a long message quoting a failed call into Spark (py4j's error naming the
    call is what Spark's interruption check looks for before its per-character regex)."""

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self.query: Any = None
        self.entered = threading.Event()

    def _apply_batch(self, df: Any, batch_id: int) -> None:
        self.entered.set()
        wait_for(
            lambda: self.query is not None and not self.query.isActive,
            timeout=30,
            what="the query's stop",
        )
        from rowbus.spark_apply.exceptions import BadEventError

        # A message that quotes a failed call into Spark, as py4j words it, Java trace and all.
        raise BadEventError(
            _PY4J_CALL_FAILED + "\tat org.example.Frame.call(Frame.java:1)\n" * 5000,
            f"{batch_id}@0",
        )


_PY4J_CALL_FAILED = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o81.collectToPython.\n"
    ": org.apache.spark.SparkException: Job 7 cancelled part of cancelled job tags\n"
)


def test_a_batch_failing_with_a_long_message_as_the_query_stops_ends_it_cleanly(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Spark is handed one short line, not the failure's whole trace: its stream thread ends
    without a StackOverflowError (Spark's uncaught-exception report on the JVM's stderr,
    captured here), and the line still names the failure."""
    from rowbus.clients import kafka
    from rowbus.spark_apply.exceptions import BadEventError, BatchFailure

    topic = make_topic("stopfail", partitions=1)
    producer = kafka.producer(services.kafka.client_config())
    producer.produce(topic, b"any", partition=0)
    assert producer.flush(15) == 0
    kafka.close_producer(producer)
    job = unique("stopfail")
    config = job_config(services, job, [topic], topic, [], tmp_path / "ckpt")
    applier = _FailsWhileStopped(config).start()
    jvm = spark.sparkContext._jvm
    err = tmp_path / "jvm-stderr.txt"
    before = jvm.java.lang.System.err
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(str(err)))
    try:
        query = start_query(spark, config, applier)
        applier.query = query
        assert applier.entered.wait(60)
        query.stop()
    finally:
        jvm.java.lang.System.err.flush()
        jvm.java.lang.System.setErr(before)
        applier.close()
    said = err.read_text()
    assert "StackOverflowError" not in said, said[:3000]
    assert applier.metrics.errors["BadEventError"] == 1
    # What Spark got, as the job's command and `recovery.retryable` read it.
    line = str(BatchFailure(BadEventError(_PY4J_CALL_FAILED * 100, "0@0"))).strip()
    assert line.startswith("BadEventError: 0@0: py4j") and len(line) == BatchFailure.LIMIT
