"""The type matrix (`corpus.CASES`) on a real source, carried by the real reader through Kafka,
then (a) rebuilt in memory by a `Subscriber` and compared with the source row for row, column
for column, types included; (b) applied by the Spark apply job into the sink and compared with
the source by SELECTing both sides. One reader run and one Spark run serve every case."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.protocol.values import Value
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES, Case, from_source, same, select
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

Rows = dict[int, tuple[Value, ...]]


@dataclass
class MatrixRun:
    setup: ReaderSetup
    source_rows: dict[str, list[tuple[Any, ...]]]
    """Per table: the rows as pymysql reads them from the source."""
    rebuilt: dict[str, Rows] = field(default_factory=dict)
    """Per table: what the Subscriber rebuilt, id -> image."""


def _topics(services: Settings, names: dict[str, dict[str, str]]) -> None:
    admin = AdminClient(services.kafka.client_config())
    new = [
        NewTopic(n, num_partitions=int(c.pop("partitions")), replication_factor=1, config=c)
        for n, c in names.items()
    ]
    for future in admin.create_topics(new, operation_timeout=15).values():
        future.result(15)


def _drop_topics(services: Settings, names: list[str]) -> None:
    admin = AdminClient(services.kafka.client_config())
    for future in admin.delete_topics(names, operation_timeout=10).values():
        future.result(15)


def _read_source(setup: ReaderSetup) -> dict[str, list[tuple[Any, ...]]]:
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        out = {}
        for case in CASES:
            cur.execute(select(case))
            out[case.table] = list(cur.fetchall())
        return out


@pytest.fixture(scope="module")
def matrix(services: Settings) -> Iterator[MatrixRun]:
    tag = uuid.uuid4().hex[:8]
    data, ckpt, schemas = f"test.fid.{tag}", f"test.fidckpt.{tag}", f"test.fidschemas.{tag}"
    compact = {"cleanup.policy": "compact", "retention.ms": "-1", "partitions": "1"}
    _topics(
        services,
        {data: {"retention.ms": "-1", "partitions": "3"}, ckpt: dict(compact), schemas: compact},
    )
    server = services.sources[0]
    database = f"fid_{tag}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    setup = ReaderSetup(services, server, data, database, "{source}", ckpt, schemas)
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3):
            index = TopicReader(services, ckpt)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs), 60, "a checkpoint"
            )
            index.close()
            with connect(server, database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION sql_mode = ''")  # zero dates, the ENUM error value, ...
                cur.execute("SET time_zone = '+00:00'")
                for case in CASES:
                    cur.execute(case.create())
                    for statement in case.inserts():
                        cur.execute(statement)
                # before images too: the NULL row takes the value of row 1, row 1 goes
                for case in CASES:
                    cur.execute(
                        f"UPDATE `{case.table}` SET v = (SELECT v FROM (SELECT v FROM "
                        f"`{case.table}` WHERE id = 1) AS x) WHERE id = 0"
                    )
                    cur.execute(f"DELETE FROM `{case.table}` WHERE id = 1")
                    cur.execute(f"INSERT INTO `{case.table}` VALUES (-1, NULL)")
            source_rows = _read_source(setup)
            run = MatrixRun(setup, source_rows)
            run.rebuilt = _rebuild(services, setup, source_rows)
        yield run
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        _drop_topics(services, [data, ckpt, schemas])


def _rebuild(
    services: Settings, setup: ReaderSetup, source_rows: dict[str, list[tuple[Any, ...]]]
) -> dict[str, Rows]:
    """A Subscriber applying every released transaction to in-memory tables."""
    tables: dict[str, Rows] = {}
    wanted = {t: len(rows) for t, rows in source_rows.items()}

    def apply(txn: Any) -> None:
        for event in txn.events:
            if isinstance(event, DdlChange) and event.table:
                tables.setdefault(event.table, {})
            elif isinstance(event, RowChange):
                rows = tables.setdefault(event.table, {})
                if event.before is not None:
                    rows.pop(int(event.before[0]), None)  # type: ignore[arg-type]
                if event.after is not None:
                    rows[int(event.after[0])] = event.after  # type: ignore[arg-type]

    def done() -> bool:
        return all(len(tables.get(t, {})) == n for t, n in wanted.items())

    with Subscriber(
        services.kafka.client_config(),
        [setup.source],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=f"fid-{uuid.uuid4().hex[:8]}",
    ) as sub:
        deadline = time.monotonic() + 180
        sub.run(apply, should_stop=lambda: done() or time.monotonic() > deadline)
    missing = {
        t: n - len(tables.get(t, {})) for t, n in wanted.items() if len(tables.get(t, {})) != n
    }
    assert not missing, f"the Subscriber did not rebuild every row within 180 s: {missing}"
    return tables


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_subscriber_rebuilds_every_value_as_the_source_has_it(
    matrix: MatrixRun, case: Case
) -> None:
    source = matrix.source_rows[case.table]
    rebuilt = matrix.rebuilt[case.table]
    assert sorted(rebuilt) == [r[0] for r in source]
    wrong = []
    for row in source:
        want = from_source(case, row[1])
        got = rebuilt[row[0]][1]
        if not same(case, got, want):
            wrong.append(f"id {row[0]}: source {want!r}, rebuilt {got!r}")
    assert not wrong, f"{case.type}: " + "; ".join(wrong)


def test_spark_apply_writes_every_value_as_the_source_has_it(
    matrix: MatrixRun, services: Settings, tmp_path: Path
) -> None:
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    setup = matrix.setup
    job = f"fid_{uuid.uuid4().hex[:8]}"
    from rowbus.routing.routes import RouteSettings

    # Every case, the ENUM error value included (a STRICT sink writes it in a statement of its
    # own under a lenient sql_mode: rowbus.spark_apply.lenient).
    cases = list(CASES)
    routes = [RouteSettings(match=f"{setup.database}.{c.table}") for c in cases]
    config = job_config(
        services,
        job,
        [setup.source],
        setup.schemas_topic,
        routes,
        tmp_path / "cp",
        unrouted="skip",
    )
    applier = BatchApplier(config).start()
    spark = shared_spark()
    try:
        query = start_query(spark, config, applier)
        try:

            def sink_rows() -> dict[str, list[tuple[Any, ...]]] | None:
                if query.exception() is not None:
                    raise AssertionError(query.exception())
                with connect(services.resolved_sink, setup.database) as conn:
                    with conn.cursor() as cur:
                        cur.execute("SET time_zone = '+00:00'")
                        out = {}
                        for case in cases:
                            cur.execute(select(case))
                            out[case.table] = list(cur.fetchall())
                # The ids, not the counts: the state before the updates has as many rows.
                if all(
                    [r[0] for r in out[c.table]] == [r[0] for r in matrix.source_rows[c.table]]
                    for c in cases
                ):
                    return out
                return None

            got = wait_for(sink_rows, timeout=300, interval=1.0, what="the sink to hold the rows")
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        wrong = [
            f"{c.type}: sink {got[c.table]!r} != source {matrix.source_rows[c.table]!r}"
            for c in cases
            if got[c.table] != matrix.source_rows[c.table]
        ]
        assert not wrong, "\n".join(wrong)
        indexes = []
        for server in (setup.server, services.resolved_sink):
            with connect(server, setup.database) as conn, conn.cursor() as cur:
                cur.execute("SELECT id, v + 0 FROM f_enum_error ORDER BY id")
                indexes.append(cur.fetchall())
        assert indexes[0] == indexes[1], "ENUM indexes (the error value is 0)"
        assert (0,) in {r[1:] for r in indexes[0]}
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{setup.database}`")
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
