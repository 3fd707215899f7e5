"""A reader restarted between an XA transaction's PREPARE and its COMMIT: the checkpoint it left
resumes before the prepared group, the new reader publishes the XA rows at the commit, and a
Subscriber gets every transaction exactly once, in commit order."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pymysql

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import ReaderCheckpoint, RowChange
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def test_xa_prepared_across_a_reader_restart_is_published_once_at_its_commit(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    server = services.sources[0]
    db = make_database(server)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=db,
        data_topic=make_topic("data", partitions=3),
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    xid = unique("xa")
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))")
    try:
        run(services, setup, xid, unique)
    finally:
        # never leave it prepared: it would hold its locks (and the database) for good
        with connect(server) as conn, conn.cursor() as cur:
            with contextlib.suppress(pymysql.MySQLError):  # XAER_NOTA: it was committed
                cur.execute(f"XA ROLLBACK '{xid}'")


def run(services: Settings, setup: ReaderSetup, xid: str, unique: Callable[[str], str]) -> None:
    server, db = setup.server, setup.database
    checkpoints = TopicReader(services, setup.checkpoints_topic)
    data = TopicReader(services, setup.data_topic)
    with reader_thread(setup, heartbeat_interval_s=0.3):
        checkpoints.until(
            lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
            timeout=60,
            what="the reader's first checkpoint",
        )
        with connect(server, db) as conn, conn.cursor() as cur:
            cur.execute(f"XA START '{xid}'")
            cur.execute("INSERT INTO a VALUES (1, 'prepared')")
            cur.execute(f"XA END '{xid}'")
            cur.execute(f"XA PREPARE '{xid}'")
        with connect(server, db) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO b VALUES (2, 'after prepare')")
        data.until(
            lambda rs: any(isinstance(r, RowChange) and r.image[0] == 2 for r in rs),
            timeout=60,
            what="the row committed after the prepare",
        )
        seen = len(checkpoints.records)
        checkpoints.until(
            lambda rs: len(rs) > seen + 2, timeout=60, what="checkpoints after that row"
        )
    assert not any(isinstance(r, RowChange) and r.image[0] == 1 for _, _, _, r in data.records)
    row2 = next(r for _, _, _, r in data.records if isinstance(r, RowChange) and r.image[0] == 2)
    last = checkpoints.until(lambda rs: True, 10, "checkpoints")[-1]
    assert isinstance(last, ReaderCheckpoint)
    # the checkpoint holds before the prepared group, behind the row committed after it
    assert last.position.offset < row2.position.offset
    checkpoints.close()
    data.close()
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute(f"XA COMMIT '{xid}'")
        cur.execute("INSERT INTO a VALUES (3, 'after commit')")
    got: list[Transaction] = []
    with reader_thread(setup, heartbeat_interval_s=0.3):
        with Subscriber(
            services.kafka.client_config(),
            [setup.data_topic],
            checkpoints_topic=setup.checkpoints_topic,
            schemas_topic=setup.schemas_topic,
            group_id=unique("sub"),
        ) as sub:
            give_up = time.monotonic() + 90

            def ids() -> list[int]:
                return [
                    int(e.image[0])  # type: ignore[arg-type]
                    for t in got
                    for e in t.events
                    if isinstance(e, RowChange)
                ]

            sub.run(
                got.append,
                idle_timeout=60,
                should_stop=lambda: 3 in ids() or time.monotonic() > give_up,
            )
    assert ids() == [2, 1, 3]
