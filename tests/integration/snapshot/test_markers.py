"""Snapshot markers end to end (PROTOCOL.md §9.7): a re-snapshot after RESET MASTER, with rows
deleted, updated and inserted during the lost history, leaves the Subscriber's rebuild equal to
the source row for row — a keyed table (rows the source no longer holds are deleted at the
end) and a keyless one (replaced whole, not duplicated). Without markers, read rows only
upsert: the deleted rows would stay and the keyless table would double."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import MarkerMode, SnapshotBegin, SnapshotEnd
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
    with private_source(_setup(services, make_topic, make_database, unique), tmp_path, 94) as s:
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


def test_a_reset_snapshot_leaves_the_rebuild_equal_to_the_source(
    services: Settings, own_source: ReaderSetup, make_database: Callable[..., str]
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
    with Subscriber(
        services.kafka.client_config(),
        [setup.data_topic],
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
        finally:
            apply.close()
    begins = [m for m in apply.markers if isinstance(m, SnapshotBegin)]
    ends = [m for m in apply.markers if isinstance(m, SnapshotEnd)]
    # two snapshots (initial, reset) of two tables; each begin met its end, in order
    assert sorted((m.table, m.position.upstream) for m in begins) == [
        ("k", 0),
        ("k", 1),
        ("t", 0),
        ("t", 1),
    ]
    assert sorted(m.snapshot for m in begins) == sorted(m.snapshot for m in ends)
    assert all(m.mode is MarkerMode.REPLACE for m in apply.markers)
    assert {(m.table, m.rows) for m in ends if m.position.upstream == 1} == {
        ("t", 33),
        ("k", 30),
    }
    assert not apply.running, "a seen set outlived its snapshot"
