"""A row of several MB is one record: the reader creates its data topic for it and publishes
it whole; on a topic that allows less, it stops with one line naming the setting."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.producer.exceptions import PublishError
from rowbus.protocol.events import RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

BIG = 3_000_000


def _setup(services: Settings, data_topic: str, make_topic, make_database, unique) -> ReaderSetup:
    server = services.sources[0]
    return ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=make_database(server),
        data_topic=data_topic,
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )


def test_a_row_of_megabytes_reaches_its_topic_whole(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    # The reader creates the data topic itself (with rowbus' topic settings).
    setup = _setup(services, unique("bigrows"), make_topic, make_database, unique)
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, b LONGBLOB)")
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, REPEAT(0x00FF, %s))", (BIG // 2,))
        data = TopicReader(services, setup.data_topic)
        rows = data.until(
            lambda rs: any(isinstance(r, RowChange) for r in rs), timeout=90, what="the big row"
        )
        data.close()
    [row] = [r for r in rows if isinstance(r, RowChange)]
    assert row.after is not None and row.after[1] == b"\x00\xff" * (BIG // 2)


def test_a_topic_that_allows_less_is_named_in_one_line(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    # A topic made beforehand with the broker's default record limit (1 MB).
    setup = _setup(services, make_topic("small", partitions=1), make_topic, make_database, unique)
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, b LONGBLOB)")

    def alive() -> bool:
        return any(
            t.name == f"reader-{setup.source}" and t.is_alive() for t in threading.enumerate()
        )

    def run() -> None:
        with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
            wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
            with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1, REPEAT(0x00FF, %s))", (BIG // 2,))
            wait_for(lambda: not alive(), timeout=90, what="the reader to stop")

    with pytest.raises(PublishError) as failed:
        run()
    assert "too large for" in str(failed.value) and "max.message.bytes" in str(failed.value)
