"""A source read through its primary and a replica (PROTOCOL.md §9.4): when the reader loses
the primary under a write load, it continues on the replica after the checkpoint's GTID set;
every change arrives exactly once and the order keys keep growing across the switch."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rowbus.clients.settings import ServerAddress
from rowbus.config import MySQLSettings
from rowbus.local.procs import ProcessRecord, launch, port_is_free
from rowbus.local.services import MariaDB
from rowbus.protocol.events import RowChange, order_key
from rowbus.protocol.positions import parse_gtid_set
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.producer.workload import Workload


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proxy:
    """A TCP forwarder to a server; `cut()` drops it and every connection through it, as a
    network partition from the primary would."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = [self.listener]
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy").start()

    def _accept(self) -> None:
        for _ in range(10_000):
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                return
            upstream.settimeout(None)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


@pytest.fixture
def replica(reader_setup: ReaderSetup, tmp_path: Path) -> Iterator[MySQLSettings]:
    """A MariaDB replica of the test's source server, replicating (by GTID, into its own
    binlog) everything the source writes from now on, the test's database included."""
    primary = reader_setup.server
    port = _free_port()
    assert port_is_free(port)
    server = MariaDB(
        "replica",
        port,
        "test.replica",
        tmp_path / "replica",
        server_id=91,
        binlog=True,
        extra=("--log-slave-updates=1", "--skip-slave-start"),
    )
    server.prepare()
    record = ProcessRecord(
        server.name, launch(server.command(), server.log_file), server.marker, server.address
    )
    try:
        wait_for(server.ready, timeout=120, what="the replica to start")
        server.after_ready()
        with connect(primary) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            (start,) = cur.fetchone()  # type: ignore[misc]
        settings = primary.model_copy(update={"port": port})
        with connect(settings) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{reader_setup.database}`")
            # The replica's own writes (its accounts, this database) are its own domain.
            cur.execute("SELECT @@gtid_binlog_pos")
            (own,) = cur.fetchone()  # type: ignore[misc]
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (f"{start},{own}",))
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos",
                (primary.port, primary.user, primary.password.get_secret_value()),
            )
            cur.execute("START SLAVE")
        yield settings
    finally:
        server.shutdown(record)


def _gtids(server: MySQLSettings) -> dict[str, int]:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()  # type: ignore[misc]
    return parse_gtid_set(pos)


def _replica_caught_up(replica: MySQLSettings, primary: MySQLSettings) -> bool:
    have = _gtids(replica)
    return all(have.get(stream, 0) >= seq for stream, seq in _gtids(primary).items())


def test_losing_the_primary_under_load_continues_on_the_replica_exactly_once(
    reader_setup: ReaderSetup, replica: MySQLSettings, caplog: pytest.LogCaptureFixture
) -> None:
    setup = reader_setup
    proxy = Proxy(setup.server.port)
    source = setup.source_connection().model_copy(
        update={"port": proxy.port, "replicas": (ServerAddress(port=replica.port),)}
    )
    Workload.create(setup.server, setup.database)
    workload = Workload(setup.server, setup.database, count=5_000, seed=11, pace_s=0.005)
    try:
        with reader_thread(setup, source=source, flush_interval_s=0.05) as reader:
            wait_for(lambda: reader.committed is not None, timeout=60, what="a first checkpoint")
            workload.start()
            wait_for(
                lambda: len(workload.written.transactions) >= 150,
                timeout=120,
                what="150 transactions before the primary is lost",
            )
            proxy.cut()
            wait_for(
                lambda: len(workload.written.transactions) >= 400,
                timeout=120,
                what="250 more transactions after it",
            )
            workload.stop.set()
            workload.join(60)
            assert workload.error is None, workload.error
            expected = workload.written.transactions
            wait_for(
                lambda: _replica_caught_up(replica, setup.server),
                timeout=120,
                what="the replica to apply everything",
            )
            data = TopicReader(setup.services, setup.data_topic)
            try:
                data.until(
                    lambda records: (
                        {r.txn.id for r in records if isinstance(r, RowChange)} >= set(expected)
                    ),
                    timeout=180,
                    what="every transaction written, in Kafka",
                )
            finally:
                data.close()
            assert reader.committed is not None and reader.committed.upstream == 1
    finally:
        workload.stop.set()
        proxy.cut()
    rows = [(p, r) for p, _, _, r in data.records if isinstance(r, RowChange)]
    keys = [(r.txn.id, r.txn.index) for _, r in rows]
    assert len(keys) == len(set(keys)), "a row change was delivered twice"
    by_txn: dict[str, list[RowChange]] = {}
    for _, row in rows:
        by_txn.setdefault(row.txn.id, []).append(row)
    assert set(by_txn) == set(expected)
    for gtid, changes in expected.items():
        got = sorted(by_txn[gtid], key=lambda r: r.txn.index)
        assert [(r.op, r.image[0], r.after[1] if r.after else None) for r in got] == changes
    upstreams = {r.position.upstream for _, r in rows}
    assert upstreams == {0, 1}, "changes before the switch at upstream 0, after it at 1"
    for partition in data.partitions:
        ordered = [order_key(r) for p, r in rows if p == partition]
        assert ordered == sorted(ordered) and len(set(ordered)) == len(ordered), (
            f"order keys do not grow on partition {partition}"
        )
    assert any("switching to" in m for m in caplog.messages)
