"""A DDL carries its source session's sql_mode and time (protocol 1.4): the values a sink
needs to run it as the source did (a lenient MODIFY, a DEFAULT CURRENT_TIMESTAMP column)."""

from __future__ import annotations

from collections.abc import Callable

from rowbus.clients import mysql
from rowbus.config import Settings
from rowbus.protocol.events import DdlChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def test_a_ddl_carries_its_sessions_sql_mode_and_time(
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
) -> None:
    setup = make_reader_setup(1)
    server = setup.server
    with connect(server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES,NO_ZERO_DATE'")
            cur.execute('ALTER TABLE "t" ADD COLUMN at TIMESTAMP(6) NOT NULL DEFAULT NOW(6)')
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("ALTER TABLE t ADD COLUMN v INT")
            cur.execute("SELECT UNIX_TIMESTAMP(at) FROM t")
            row = cur.fetchone()
            assert row is not None
            source_us = int(row[0] * 1_000_000)
        data = TopicReader(services, setup.data_topic)
        records = data.until(
            lambda rs: sum(isinstance(r, DdlChange) for r in rs) >= 2,
            timeout=60,
            what="both ALTERs",
        )
        data.close()
    first, second = [r for r in records if isinstance(r, DdlChange)]
    assert first.sql_mode == "ANSI_QUOTES,NO_ZERO_DATE"
    assert first.timestamp_us == source_us  # the old row's NOW(6): the statement's moment
    assert second.sql_mode == ""
    assert second.timestamp_us is not None and second.timestamp_us >= source_us


def test_a_ddl_is_read_in_its_sessions_client_character_set(
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
) -> None:
    """A latin1 or gbk client sends its statement's bytes in that character set: the DDL
    published is the text the server read, not those bytes taken as UTF-8."""
    setup = make_reader_setup(1)
    server = setup.server
    statements = {
        "latin1": "CREATE TABLE l (id INT PRIMARY KEY, v VARCHAR(5) DEFAULT 'é', "
        "e ENUM('à','ÿ') DEFAULT 'ÿ') COMMENT 'ça'",
        "gbk": "CREATE TABLE g (id INT PRIMARY KEY, v VARCHAR(5) DEFAULT '中文', "
        "e ENUM('表','b')) COMMENT '数据'",
    }
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        for charset, statement in statements.items():
            conn = mysql.connect(server, database=setup.database, charset=charset)
            try:
                with conn.cursor() as cur:
                    cur.execute(statement)
            finally:
                conn.close()
        data = TopicReader(services, setup.data_topic)
        records = data.until(
            lambda rs: sum(isinstance(r, DdlChange) for r in rs) >= 2,
            timeout=60,
            what="both CREATEs",
        )
        data.close()
    published = [r.statement for r in records if isinstance(r, DdlChange)]
    assert published == list(statements.values())
