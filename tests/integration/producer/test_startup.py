"""Start-up: refusing a server the reader cannot use, a purged position, and every start form;
and fencing of a zombie producer by the transactional.id."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rowbus.clients.settings import SourceConnection
from rowbus.producer.exceptions import FencedError, PositionPurgedError, ServerMisconfiguredError
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.reader import derived_server_id
from rowbus.producer.server import SourceServer
from rowbus.producer.start import parse_start
from rowbus.protocol.events import BinlogPosition
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup


def test_user_without_replication_grants_is_refused(
    reader_setup: ReaderSetup, unique: Callable[[str], str]
) -> None:
    setup = reader_setup
    user = unique("nogrant")
    with connect(setup.server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT SELECT ON `{setup.database}`.* TO '{user}'@'%'")
    try:
        source = SourceConnection(
            name="x", host=setup.server.host, port=setup.server.port, user=user, password="pw"
        )
        with SourceServer(source) as server, pytest.raises(ServerMisconfiguredError) as err:
            server.check()
        message = str(err.value)
        assert "REPLICATION SLAVE" in message
        assert "\n" not in message
    finally:
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'%'")


def test_configured_server_passes_and_purged_position_names_the_oldest(
    reader_setup: ReaderSetup,
) -> None:
    with SourceServer(reader_setup.source_connection()) as server:
        server.check()
        oldest = server.binary_logs()[0][0]
        with pytest.raises(PositionPurgedError) as err:
            server.ensure_available(BinlogPosition("binlog.000000", 4, None), "checkpoint position")
    message = str(err.value)
    assert f"{oldest}:4" in message
    assert "earliest" in message
    assert "snapshot" in message


def test_start_positions_are_transaction_boundaries(reader_setup: ReaderSetup) -> None:
    setup = reader_setup
    sid = derived_server_id(setup.source)
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO s VALUES (1)")
        cur.execute("SELECT @@last_gtid")
        gtid = str(cur.fetchone()[0])  # type: ignore[index]
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]  # type: ignore[index]
        # Binlog timestamps have 1 s resolution: the next insert must fall in a later second.
        first_second = int(time.time())
        after = wait_for(
            lambda: int(time.time()) if int(time.time()) > first_second else None,
            timeout=3,
            what="the next wall-clock second",
        )
        cur.execute("INSERT INTO s VALUES (2)")
    with SourceServer(setup.source_connection()) as server:
        at_gtid = server.locator.locate(parse_start(f"gtid:{gtid}"), sid)
        assert (at_gtid.file, at_gtid.offset) == (file, pos)
        at_file = server.locator.locate(parse_start(f"file:{file}:{pos}"), sid)
        assert (at_file.file, at_file.offset) == (file, pos)
        assert at_file.gtid is not None
        assert gtid in at_file.gtid
        at_time = server.locator.locate(parse_start(f"timestamp:{after}"), sid)
        assert (at_time.file, at_time.offset) >= (file, pos)
        latest = server.locator.locate(parse_start("latest"), sid)
        assert (latest.file, latest.offset) > (file, pos)
        earliest = server.locator.locate(parse_start("earliest"), sid)
        assert earliest.offset == 4


def test_a_second_producer_fences_the_first(reader_setup: ReaderSetup) -> None:
    config = reader_setup.services.kafka.client_config()
    tid = f"rowbus-reader-{reader_setup.source}"
    zombie = KafkaPublisher(config, tid)
    successor = KafkaPublisher(config, tid)
    try:
        zombie.start()
        zombie.begin()
        zombie.produce([(reader_setup.data_topic, 0, None, b"zombie", [])])
        successor.start()
        with pytest.raises(FencedError):  # noqa: PT012 - either call may see the fence first
            zombie.flush()
            zombie.commit()
    finally:
        # Both closed: a publisher's producer refers back to it (its error callback), so one
        # left open lives on until the cyclic collector runs, connecting to the broker.
        successor.close()
        zombie.close()
