"""Snapshot markers end to end (PROTOCOL.md §9.7): a re-snapshot after RESET MASTER, with rows
deleted, updated and inserted during the lost history, leaves the Subscriber's rebuild and the
Spark sink equal to the source row for row — a keyed table (rows the source no longer holds are
deleted at the end) and a keyless one (replaced whole, not duplicated). Without markers, read
rows only upsert: the deleted rows would stay and the keyless table would double. Then an
incremental snapshot (`rowbus snapshot`, mode refresh) of the keyed table, which both already
hold, removes a row the source lost without a trace in the binlog.

The Subscriber follows the reader live; one Spark run then applies the whole topic (both
snapshots and the stream) into an empty database, whose tables the snapshot's CREATEs make."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.exceptions import WaitTimeoutError
from rowbus.producer.snapshot.signals import publish
from rowbus.protocol.events import MarkerMode, SnapshotBegin, SnapshotEnd
from rowbus.routing.routes import RouteSettings
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, private_source, reader_thread
from tests.integration.snapshot.marked import MarkedApply
from tests.integration.snapshot.test_initial import _setup

TABLES = (
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))",
    "CREATE TABLE {db}.k (a INT, b VARCHAR(10))",
)


@pytest.fixture
def own_source(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> Iterator[ReaderSetup]:
    # The apply job reads the topic "{source}": the source is named as its data topic.
    topic = make_topic("markers", partitions=3)
    base = _setup(services, make_topic, make_database, unique)
    base = dataclasses.replace(base, source=topic, data_topic="{source}")
    with private_source(base, tmp_path, 94) as s:
        _run(s.server, s.database, *(sql.format(db=f"`{s.database}`") for sql in TABLES))
        yield s


def _run(server: MySQLSettings, database: str, *statements: str) -> None:
    with connect(server, database) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
        conn.commit()


def _tables(server: MySQLSettings, db: str) -> tuple[dict[Any, Any], Counter[tuple[Any, ...]]]:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, v FROM `{db}`.t")
        keyed = {r[0]: r[1] for r in cur.fetchall()}
        cur.execute(f"SELECT a, b FROM `{db}`.k")
        keyless = Counter(tuple(r) for r in cur.fetchall())
    return keyed, keyless


def test_a_reset_snapshot_leaves_the_rebuild_and_the_spark_sink_equal_to_the_source(
    services: Settings,
    own_source: ReaderSetup,
    make_database: Callable[..., str],
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    setup, db = own_source, f"`{own_source.database}`"
    _run(
        setup.server,
        setup.database,
        f"INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_40",
        # duplicates and NULLs: rows identified by all their columns (§9.3)
        f"INSERT INTO {db}.k SELECT seq % 4, IF(seq % 3 = 0, NULL, 'x') FROM seq_1_to_30",
    )
    sink_db = make_database(services.resolved_sink)
    _run(services.resolved_sink, sink_db, *(sql.format(db=f"`{sink_db}`") for sql in TABLES))
    signals = make_topic("signals", partitions=1)
    with Subscriber(
        services.kafka.client_config(),
        [setup.source],
        sources=[setup.source],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=f"markers-{uuid.uuid4().hex[:8]}",
    ) as sub:
        apply = MarkedApply(services.resolved_sink, sink_db)

        def equal() -> bool:
            for _ in range(20):
                txns = sub.poll(0.2)
                if not txns:
                    break
                apply(sub, txns)
            return _tables(services.resolved_sink, sink_db) == _tables(setup.server, setup.database)

        try:
            options: dict[str, Any] = {
                "snapshot": "when_needed",
                "snapshot_chunk_rows": 7,  # several chunks of the keyed table
                "heartbeat_interval_s": 0.3,
                "signal_topic": signals,
            }
            with reader_thread(setup, **options):
                wait_for(equal, timeout=60, what="the initial snapshot in the sink")
            # The lost history: deletes, updates and inserts the new snapshot must show.
            _run(
                setup.server,
                setup.database,
                f"DELETE FROM {db}.t WHERE id <= 8 OR id = 33",
                f"UPDATE {db}.t SET v = 'lost' WHERE id IN (10, 20)",
                f"INSERT INTO {db}.t VALUES (100, 'new'), (101, NULL)",
                f"DELETE FROM {db}.k WHERE a = 1 LIMIT 2",
                f"INSERT INTO {db}.k VALUES (9, 'lost'), (9, 'lost')",
                "RESET MASTER",
            )
            with reader_thread(setup, **options):
                wait_for(equal, timeout=60, what="the reset snapshot in the sink")
                # The stream after it, on both tables.
                _run(
                    setup.server,
                    setup.database,
                    f"DELETE FROM {db}.t WHERE id = 9",
                    f"INSERT INTO {db}.t VALUES (200, 'after')",
                    f"INSERT INTO {db}.k VALUES (0, 'after')",
                )
                wait_for(equal, timeout=60, what="the stream after the reset snapshot")
                # A row gone at the source without a trace in the binlog (a sink that
                # drifted): an incremental snapshot (mode refresh) of the table removes it.
                _run(
                    setup.server,
                    setup.database,
                    "SET SESSION sql_log_bin = 0",
                    f"DELETE FROM {db}.t WHERE id = 11",
                    "SET SESSION sql_log_bin = 1",
                )
                publish(
                    services.kafka.client_config(), signals, setup.source, [f"{setup.database}.t"]
                )
                wait_for(equal, timeout=60, what="the incremental snapshot in the sink")
        finally:
            apply.close()
    begins = [m for m in apply.markers if isinstance(m, SnapshotBegin)]
    ends = [m for m in apply.markers if isinstance(m, SnapshotEnd)]
    # two snapshots (initial, reset) of two tables, then an incremental one of t; each begin
    # met its end, in order
    assert sorted((m.table, m.position.upstream, m.mode.value) for m in begins) == [
        ("k", 0, "replace"),
        ("k", 1, "replace"),
        ("t", 0, "replace"),
        ("t", 1, "refresh"),
        ("t", 1, "replace"),
    ]
    order = [(m.snapshot, isinstance(m, SnapshotEnd)) for m in apply.markers]
    assert sorted(order) == sorted([(m.snapshot, e) for m in begins for e in (False, True)])
    assert all(order.index((m.snapshot, False)) < order.index((m.snapshot, True)) for m in begins)
    assert {(m.table, m.rows) for m in ends if m.mode is MarkerMode.REFRESH} == {("t", 32)}
    reset = MarkerMode.REPLACE
    assert {(m.table, m.rows) for m in ends if m.position.upstream == 1 and m.mode is reset} == {
        ("t", 33),
        ("k", 30),
    }
    assert not apply.running, "a seen set outlived its snapshot"

    _spark_apply(services, setup, make_database(services.resolved_sink), tmp_path)


def _spark_apply(services: Settings, setup: ReaderSetup, sink_db: str, tmp_path: Path) -> None:
    """One run of the apply job over the whole topic into the empty `sink_db`, until it equals
    the source."""
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    job = f"markers_{uuid.uuid4().hex[:8]}"
    routes = [RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}")]
    config = job_config(services, job, [setup.source], setup.schemas_topic, routes, tmp_path / "cp")
    want = _tables(setup.server, setup.database)
    applier = BatchApplier(config).start()
    try:
        query = start_query(shared_spark(), config, applier)
        try:

            def equal() -> bool:
                if query.exception() is not None:
                    raise _QueryFailed(str(query.exception())[:2000])
                try:
                    return _tables(services.resolved_sink, sink_db) == want
                except pymysql.err.ProgrammingError:
                    return False  # the tables are not created yet

            try:
                wait_for(
                    equal,
                    timeout=120,
                    interval=1.0,
                    what="the Spark sink to equal the source",
                    stop_on=(_QueryFailed,),
                )
            except WaitTimeoutError:
                got = _tables(services.resolved_sink, sink_db)
                raise AssertionError(f"the Spark sink {got} != the source {want}") from None
            assert not applier.sink.seen.running, "a seen set outlived its snapshot"
        finally:
            query.stop()
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")


class _QueryFailed(Exception):
    """The streaming query stopped with an error: waiting longer cannot help."""
