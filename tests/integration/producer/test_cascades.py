"""A foreign key whose cascades the server applies below its row log: the reader says so at
start, naming both tables and the rule, and the binlog indeed lacks the cascaded rows."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def test_cascading_foreign_keys_are_named_at_start(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = services.sources[0]
    db = make_database(server)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=db,
        data_topic=make_topic("data", partitions=1),
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE parent (id INT PRIMARY KEY)")
        cur.execute(
            "CREATE TABLE child (id INT PRIMARY KEY, pid INT, "
            "FOREIGN KEY (pid) REFERENCES parent (id) ON DELETE CASCADE)"
        )
        cur.execute(
            "CREATE TABLE plain (id INT PRIMARY KEY, pid INT, "
            "FOREIGN KEY (pid) REFERENCES parent (id))"
        )
    caplog.set_level(logging.WARNING, logger="rowbus.producer.reader")
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        m = reader.metrics
        wait_for(lambda: m.heartbeats > 0, timeout=60, what="a first heartbeat")
        told = [r.getMessage() for r in caplog.records if "references" in r.getMessage()]
        assert len(told) == 1, told
        assert f"{db}.child references {db}.parent with ON DELETE CASCADE" in told[0]
        with connect(server, db) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO parent VALUES (1)")
            cur.execute("INSERT INTO child VALUES (10, 1)")
            cur.execute("DELETE FROM parent WHERE id = 1")
            cur.execute("INSERT INTO plain VALUES (1, NULL)")  # what comes after
        data = TopicReader(services, setup.data_topic)
        rows = data.until(
            lambda rs: any(isinstance(r, RowChange) and r.table == "plain" for r in rs),
            timeout=60,
            what="the row written after the delete",
        )
        data.close()
        deletes = [r.table for r in rows if isinstance(r, RowChange) and r.op is Op.DELETE]
        # What the warning says: the child's cascaded delete is not in the binlog.
        assert deletes == ["parent"]
