"""A MariaDB source with log_bin_compress=ON: the reader fails closed, never skips.

Found by an independent run: the library drops event types it has no class for (compressed
Query and rows events among them) before the reader sees them, so a reader of a compressed
binlog published 1 row of 6 and no CREATE TABLE, and logged nothing. Here the stream (on each
decoding path) and the real reader must stop at the first compressed event with one line naming
its binlog position and the setting, and publish nothing past the last whole transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.producer.assembler import Rows
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings
from rowbus.producer.tables import TableFilter
from rowbus.protocol.events import Record, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader
from tests.integration.producer.test_fastpath import _binlog_end, _stream

PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}


@pytest.fixture(autouse=True)
def _purge_compressed_events(services: Settings) -> Iterator[None]:
    """The compressed events a test writes would stop every later test that reads across them
    in the shared source's binlog (a start from earliest, a scan for a timestamp): the binlog
    files they are in are purged when the test ends."""
    yield
    with connect(services.sources[0]) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        current = cur.fetchone()
        assert current is not None
        cur.execute("PURGE BINARY LOGS TO %s", (current[0],))


@contextmanager
def compressed_binlog(server: MySQLSettings) -> Iterator[None]:
    """log_bin_compress=ON with a threshold every statement and rows event passes; restored
    after (the setting is global: other tests on this server must not see it)."""
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.log_bin_compress, @@GLOBAL.log_bin_compress_min_len")
        was = cur.fetchone()
        assert was is not None
        cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
        cur.execute("SET GLOBAL log_bin_compress = ON")
    try:
        yield
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress = %s", (was[0],))
            cur.execute("SET GLOBAL log_bin_compress_min_len = %s", (was[1],))


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


@pytest.mark.parametrize("path", list(PATHS))
def test_each_path_stops_at_the_first_compressed_event_with_its_position(
    reader_setup: ReaderSetup, path: str
) -> None:
    server, db = reader_setup.server, reader_setup.database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(40))")
    start = _binlog_end(server)
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO plain VALUES (1, 'written before compression')")
        with compressed_binlog(server):
            # A fresh session: MariaDB decides per statement at write time.
            with connect(server, db) as conn2, conn2.cursor() as cur2:
                cur2.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
                cur2.execute("SHOW MASTER STATUS")
                after_create = cur2.fetchone()
                for i in range(6):
                    cur2.execute("INSERT INTO t VALUES (%s, 'a value long enough')", (i,))
    assert after_create is not None
    fast, framed = PATHS[path]
    stream = _stream(server, start, TableFilter(include_schemas=[db]), fast, framed)
    rows: list[str] = []

    def read_all() -> None:
        for event in stream.events():
            if isinstance(event, Rows):
                rows.extend(f"{event.table.table} {after}" for _, after in event.decode())

    try:
        with pytest.raises(ServerMisconfiguredError) as refused:
            read_all()
    finally:
        stream.close()
    text = _one_line(refused.value)
    assert "log_bin_compress" in text and "Query_compressed" in text, text
    # The position named is the CREATE TABLE's own (its end), in the file it was written to.
    assert text.startswith(f"{after_create[0]}:{after_create[1]}: "), text
    assert rows == ["plain (1, 'written before compression')"]


class _ReaderThread:
    """The real reader in a thread; `error` is what ended it."""

    def __init__(self, setup: ReaderSetup, **overrides: object) -> None:
        settings = ReaderSettings(**setup.reader_settings(election=False, **overrides))
        self.reader = Reader(setup.source_connection(), settings, setup.services_for_reader())
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"reader-{setup.source}")

    def _run(self) -> None:
        try:
            self.reader.run(self.stop)
        except BaseException as exc:  # examined by the test
            self.error = exc
        finally:
            self.ended.set()

    def __enter__(self) -> _ReaderThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "reader thread did not stop within 30 s"


def _values(records: list[Record]) -> list[tuple[str, object]]:
    return [(r.table, r.after[0] if r.after else None) for r in records if isinstance(r, RowChange)]


def test_the_reader_refuses_a_compressed_binlog_before_it_starts(
    reader_setup: ReaderSetup,
) -> None:
    setup = reader_setup
    with compressed_binlog(setup.server):
        with _ReaderThread(setup) as running:
            wait_for(running.ended.is_set, timeout=60, what="the reader to refuse to start")
    assert isinstance(running.error, ServerMisconfiguredError), running.error
    text = _one_line(running.error)
    assert "log_bin_compress is ON" in text and "set log_bin_compress=OFF" in text, text


def test_compression_turned_on_while_reading_stops_the_reader_at_the_first_compressed_event(
    reader_setup: ReaderSetup,
) -> None:
    setup = reader_setup
    server, db = setup.server, setup.database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    file, pos = _binlog_end(server)
    topic = TopicReader(setup.services, setup.data_topic)
    try:
        with _ReaderThread(setup, start=f"file:{file}:{pos}") as running:
            with connect(server, db) as conn, conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1, 'before compression')")
            topic.until(
                lambda rs: ("t", 1) in _values(rs), timeout=90, what="row 1 to be published"
            )
            with compressed_binlog(server):
                with connect(server, db) as conn, conn.cursor() as cur:
                    cur.execute("SHOW MASTER STATUS")
                    at = cur.fetchone()
                    for i in range(2, 8):
                        cur.execute("INSERT INTO t VALUES (%s, 'after compression on')", (i,))
                wait_for(running.ended.is_set, timeout=60, what="the reader to stop")
        assert isinstance(running.error, ServerMisconfiguredError), running.error
        text = _one_line(running.error)
        assert at is not None
        assert text.startswith(f"{at[0]}:"), text
        assert "Write_rows_compressed" in text and "set log_bin_compress=OFF" in text, text
        topic.poll()
        assert _values([r for _, _, _, r in topic.records]) == [("t", 1)]
    finally:
        topic.close()
