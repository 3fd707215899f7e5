"""Snapshot markers end to end (PROTOCOL.md §9.7): a re-snapshot after RESET MASTER, with rows
deleted, updated and inserted during the lost history, leaves the Subscriber's rebuild and the
Spark sink equal to the source row for row — a keyed table (rows the source no longer holds are
deleted at the end) and a keyless one (replaced whole, not duplicated). Without markers, read
rows only upsert: the deleted rows would stay and the keyless table would double. A table
dropped during the lost history, which the reset snapshot no longer finds, gets a snapshot of
no rows: both empty it (without one it kept its rows). Then an
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
from rowbus.consumers.stores.sql import SqlCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.exceptions import WaitTimeoutError
from rowbus.producer.snapshot.signals import publish
from rowbus.protocol.events import MarkerMode, RowChange, SnapshotBegin, SnapshotEnd
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
GONE = "CREATE TABLE {db}.g (id INT PRIMARY KEY)"


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
        # dropped during the lost history: the reset snapshot no longer finds it
        GONE.format(db=db),
        f"INSERT INTO {db}.g VALUES (1), (2), (3)",
    )
    sink_db = make_database(services.resolved_sink)
    made = (*TABLES, GONE)
    _run(services.resolved_sink, sink_db, *(sql.format(db=f"`{sink_db}`") for sql in made))
    signals = make_topic("signals", partitions=1)
    rebuild = _Rebuild(services, setup, sink_db)
    try:
        options: dict[str, Any] = {
            "snapshot": "when_needed",
            "snapshot_chunk_rows": 7,  # several chunks of each table
            "heartbeat_interval_s": 0.3,
            "signal_topic": signals,
        }
        with reader_thread(setup, **options):
            wait_for(rebuild.equal, timeout=60, what="the initial snapshot in the sink")
        # The lost history: deletes, updates and inserts the new snapshot must show.
        _run(
            setup.server,
            setup.database,
            f"DELETE FROM {db}.t WHERE id <= 8 OR id = 33",
            f"UPDATE {db}.t SET v = 'lost' WHERE id IN (10, 20)",
            f"INSERT INTO {db}.t VALUES (100, 'new'), (101, NULL)",
            f"DELETE FROM {db}.k WHERE a = 1 LIMIT 2",
            f"INSERT INTO {db}.k VALUES (9, 'lost'), (9, 'lost')",
            f"DROP TABLE {db}.g",
            "RESET MASTER",
        )
        with reader_thread(setup, **options):
            # The consumer restarts in the middle of the keyless table's reset snapshot, from
            # the checkpoint it committed with the rows: no chunk applied twice, none lost.
            wait_for(
                rebuild.mid_keyless,
                timeout=60,
                what="the rebuild to apply a first chunk of the keyless table's reset snapshot",
            )
            rebuild.restart()
            assert 0 < _count(services.resolved_sink, sink_db, "k") < 30
            wait_for(rebuild.equal, timeout=60, what="the reset snapshot in the sink")
            # released before the first row of the reset snapshot
            assert _count(services.resolved_sink, sink_db, "g") == 0
            # The stream after it, on both tables.
            _run(
                setup.server,
                setup.database,
                f"DELETE FROM {db}.t WHERE id = 9",
                f"INSERT INTO {db}.t VALUES (200, 'after')",
                f"INSERT INTO {db}.k VALUES (0, 'after')",
            )
            wait_for(rebuild.equal, timeout=60, what="the stream after the reset snapshot")
            # A row gone at the source without a trace in the binlog (a sink that
            # drifted): an incremental snapshot (mode refresh) of the table removes it.
            _run(
                setup.server,
                setup.database,
                "SET SESSION sql_log_bin = 0",
                f"DELETE FROM {db}.t WHERE id = 11",
                "SET SESSION sql_log_bin = 1",
            )
            publish(services.kafka.client_config(), signals, setup.source, [f"{setup.database}.t"])
            wait_for(rebuild.equal, timeout=60, what="the incremental snapshot in the sink")
    finally:
        rebuild.close()
    assert not rebuild.running, "a seen set outlived its snapshot"
    markers = rebuild.markers
    begins = [m for m in markers if isinstance(m, SnapshotBegin)]
    ends = [m for m in markers if isinstance(m, SnapshotEnd)]
    # two snapshots (initial, reset) of two tables, then an incremental one of t; each begin
    # met its end, in order
    assert sorted((m.table, m.position.upstream, m.mode.value) for m in begins) == [
        ("g", 0, "replace"),
        ("g", 1, "replace"),  # gone: a snapshot of no rows
        ("k", 0, "replace"),
        ("k", 1, "replace"),
        ("t", 0, "replace"),
        ("t", 1, "refresh"),
        ("t", 1, "replace"),
    ]
    order = [(m.snapshot, isinstance(m, SnapshotEnd)) for m in markers]
    assert sorted(order) == sorted([(m.snapshot, e) for m in begins for e in (False, True)])
    assert all(order.index((m.snapshot, False)) < order.index((m.snapshot, True)) for m in begins)
    assert {(m.table, m.rows) for m in ends if m.mode is MarkerMode.REFRESH} == {("t", 32)}
    reset = MarkerMode.REPLACE
    assert {(m.table, m.rows) for m in ends if m.position.upstream == 1 and m.mode is reset} == {
        ("t", 33),
        ("k", 30),
        ("g", 0),
    }
    # The apply job, too, stops in the middle of a snapshot of the keyless table (small batches
    # put a batch boundary there) and a new one resumes from its checkpoint.
    spark_db = make_database(services.resolved_sink)
    _spark_apply(
        services,
        setup,
        spark_db,
        tmp_path,
        restart_when=lambda: 0 < _count(services.resolved_sink, spark_db, "k") < 30,
        restart_batch=5,
    )
    assert _count(services.resolved_sink, spark_db, "g") == 0, "the gone table kept its rows"


def _count(server: MySQLSettings, db: str, table: str) -> int:
    """The rows of `db`.`table` (0 while it does not exist)."""
    with connect(server) as conn, conn.cursor() as cur:
        try:
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
        except pymysql.err.ProgrammingError:
            return 0
        row = cur.fetchone()
        return int(row[0]) if row else 0


class _Rebuild:
    """The Subscriber's rebuild into `sink_db` (`MarkedApply`), each transaction's checkpoint
    saved in the sink transaction of its rows (`SqlCheckpointStore.save_in`: exactly once), so
    `restart` (a new Subscriber from the stored checkpoint) neither repeats nor skips one."""

    def __init__(self, services: Settings, setup: ReaderSetup, sink_db: str) -> None:
        self._services, self._setup, self._db = services, setup, sink_db
        self.markers: list[SnapshotBegin | SnapshotEnd] = []
        self.running: set[str] = set()
        self._apply: MarkedApply | None = None
        self._open()

    def _open(self) -> None:
        sink, db = self._services.resolved_sink, self._db
        self._store = SqlCheckpointStore(
            lambda: connect(sink, db, autocommit=False), name="markers"
        )
        self._sub = Subscriber(
            self._services.kafka.client_config(),
            [self._setup.source],
            store=self._store,
            sources=[self._setup.source],
            checkpoints_topic=self._setup.checkpoints_topic,
            schemas_topic=self._setup.schemas_topic,
            group_id=f"markers-{uuid.uuid4().hex[:8]}",
        )
        self._sub.start()
        self._apply = MarkedApply(sink, db, self._store)

    def close(self) -> None:
        if self._apply is not None:
            self.markers += self._apply.markers
            self.running = set(self._apply.running)
            self._apply.close()
            self._sub.close()
            self._apply = None

    def restart(self) -> None:
        self.close()
        self._open()

    def equal(self) -> bool:
        """Apply what is released; whether the sink equals the source."""
        assert self._apply is not None
        for _ in range(20):
            txns = self._sub.poll(0.2)
            if not txns:
                break
            self._apply(self._sub, txns)
        return _tables(self._services.resolved_sink, self._db) == _tables(
            self._setup.server, self._setup.database
        )

    def mid_keyless(self) -> bool:
        """Apply released transactions one by one, up to the first chunk of rows of the
        keyless table `k` after a `snapshot_begin` of it (at upstream 1: the reset one); what
        the poll released after it is left to the next Subscriber."""
        assert self._apply is not None
        for txn in self._sub.poll(0.2):
            self._apply(self._sub, [txn])
            begun = [m for m in self._apply.markers if m.table == "k"]
            if (
                txn.marker is None
                and begun
                and isinstance(begun[-1], SnapshotBegin)
                and begun[-1].position.upstream == 1
                and any(isinstance(e, RowChange) and e.table == "k" for e in txn.events)
            ):
                return True
        return False


def _spark_apply(
    services: Settings,
    setup: ReaderSetup,
    sink_db: str,
    tmp_path: Path,
    restart_when: Callable[[], bool] | None = None,
    restart_batch: int | None = None,
    **apply: Any,
) -> None:
    """One run of the apply job over the whole topic into the empty `sink_db`, until it equals
    the source. `restart_when` (a condition on the sink): first a run stopped as soon as it
    holds, and which must still hold once the run stopped, reading at most `restart_batch`
    offsets per batch; the run to equality is then a new job (a new applier and query) resuming
    from that one's checkpoint. `apply`: job settings."""
    job = f"markers_{uuid.uuid4().hex[:8]}"
    routes = [RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}")]
    config = _job_config(services, job, setup, routes, tmp_path / "cp", **apply)
    want = _tables(setup.server, setup.database)

    def equal() -> bool:
        try:
            return _tables(services.resolved_sink, sink_db) == want
        except pymysql.err.ProgrammingError:
            return False  # the tables are not created yet

    try:
        if restart_when is not None:
            limit = {"max_offsets_per_trigger": restart_batch}
            first = config.model_copy(update={"apply": config.apply.model_copy(update=limit)})
            _run_job(first, restart_when, "the Spark sink to reach the restart point")
            assert restart_when(), "the first run stopped past its restart point"
        try:
            seen = _run_job(config, equal, "the Spark sink to equal the source")
        except WaitTimeoutError:
            got = _tables(services.resolved_sink, sink_db)
            raise AssertionError(f"the Spark sink {got} != the source {want}") from None
        assert not seen, "a seen set outlived its snapshot"
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")


def _job_config(
    services: Settings,
    job: str,
    setup: ReaderSetup,
    routes: list[RouteSettings],
    checkpoint: Path,
    **apply: Any,
) -> Any:
    from tests.integration.spark_apply.test_spark_apply import job_config

    return job_config(
        services, job, [setup.source], setup.schemas_topic, routes, checkpoint, **apply
    )


def _run_job(config: Any, until: Callable[[], bool], what: str) -> set[Any]:
    """Run the apply job until `until()`, then stop it; the seen sets its sink still runs."""
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import shared_spark

    applier = BatchApplier(config).start()
    try:
        query = start_query(shared_spark(), config, applier)
        try:

            def done() -> bool:
                if query.exception() is not None:
                    raise _QueryFailed(str(query.exception())[:2000])
                return until()

            wait_for(done, timeout=120, interval=0.2, what=what, stop_on=(_QueryFailed,))
            return set(applier.sink.seen.running)
        finally:
            query.stop()
    finally:
        applier.close()


class _QueryFailed(Exception):
    """The streaming query stopped with an error: waiting longer cannot help."""
