"""A MariaDB source with log_bin_compress=ON: compressed events are read as their plain form.

Found by an independent run: the library drops event types it has no class for (compressed
Query and rows events among them), so a reader of a compressed binlog published 1 row of 6 and
no CREATE TABLE, and logged nothing; then the reader was made to stop at them. Now they are
inflated (`rowbus.producer.compressed`): the same workload written once with compression off
and once with it on (a table of many types created, filled, updated, deleted and ALTERed, and
the fidelity corpus) must give the same rows on every decoding path and the same records from
the real reader, and a compressed event the server wrote, corrupted, stops every path.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.producer import binlog, compressed, fastrows
from rowbus.producer.exceptions import CorruptBinlogError
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings
from rowbus.protocol.events import DdlChange, Record, RowChange
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES
from tests.integration.producer.helpers import ReaderSetup, TopicReader
from tests.integration.producer.test_fastpath import _binlog_end, _read
from tests.unit.producer.test_compressed_events import _first, _Replay
from tests.unit.producer.test_event_types import FILE

PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}

MANY_TYPES = [
    "CREATE TABLE many (id INT PRIMARY KEY, big BIGINT UNSIGNED, amount DECIMAL(20,6), "
    "at DATETIME(6), name VARCHAR(100), body TEXT, data BLOB, doc JSON, "
    "e ENUM('a','b','c'), s SET('x','y','z'), bits BIT(10), n INT) DEFAULT CHARSET=utf8mb4",
    "INSERT INTO many VALUES (1, 18446744073709551615, -12345678901234.123456, "
    "'2024-02-29 23:59:59.999999', 'zoë 🐬 ünïcode', REPEAT('text ', 60), X'00FF10AB', "
    "'{\"a\": [1, 2.5, null, \"x\"]}', 'b', 'x,z', b'1010101010', NULL), "
    "(2, 0, 0, '1970-01-01 00:00:01', '', '', '', '[]', 'a', '', b'0', 7), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "UPDATE many SET name = CONCAT(name, ' ✓'), big = 42, n = n + 1 WHERE id IN (1, 2)",
    "DELETE FROM many WHERE id = 3",
    "ALTER TABLE many ADD COLUMN extra VARCHAR(20) DEFAULT 'after alter', DROP COLUMN n",
    "INSERT INTO many (id, name, doc, bits) VALUES (4, 'after the ALTER', '{\"k\": true}', b'1')",
    "UPDATE many SET extra = 'updated after', amount = 0.000001 WHERE id = 1",
    "DELETE FROM many WHERE id = 2",
]


def _workload() -> list[str]:
    """The many-types table's life, then the fidelity corpus (every type by its edge values)
    inserted, updated and half deleted; the last statement marks the end."""
    out = ["SET time_zone = '+00:00'", "SET SESSION sql_mode = ''", *MANY_TYPES]
    for case in CASES:
        out += [case.create(), *case.inserts()]
        out.append(f"UPDATE `{case.table}` SET v = NULL WHERE id = 1")
        out.append(f"DELETE FROM `{case.table}` WHERE id % 2 = 0")
    return [*out, "CREATE TABLE done (id INT PRIMARY KEY)", "INSERT INTO done VALUES (1)"]


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


def _event_types(server: MySQLSettings, start: tuple[str, int]) -> dict[str, int]:
    """How many events of each type the binlog holds from `start` on (in its file)."""
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{start[0]}' FROM {start[1]}")
        counts: dict[str, int] = {}
        for row in cur.fetchall():
            counts[row[2]] = counts.get(row[2], 0) + 1
    return counts


@pytest.fixture(scope="module")
def two_workloads(services: Settings) -> Iterator[dict[str, Any]]:
    """The workload written into a database with compression off, then into another with it
    on (a fresh session: MariaDB decides per statement at write time); the binlog range of
    both. The databases are dropped at the end."""
    server = services.sources[0]
    plain, zipped = (f"zc_{kind}_{uuid.uuid4().hex[:6]}" for kind in ("plain", "zip"))
    start = _binlog_end(server)
    for db, on in ((plain, False), (zipped, True)):
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
        with compressed_binlog(server) if on else _nothing():
            with connect(server, db) as conn, conn.cursor() as cur:
                zip_start = _binlog_end(server)
                for statement in _workload():
                    cur.execute(statement)
    try:
        yield {"server": server, "plain": plain, "zipped": zipped, "start": start, "zip": zip_start}
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            for db in (plain, zipped):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            # Later tests that read across this range must not meet a compressed event they
            # were not written for: the files holding it are purged.
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            current = cur.fetchone()
            assert current is not None
            cur.execute("PURGE BINARY LOGS TO %s", (current[0],))


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_the_server_wrote_the_second_workload_compressed(two_workloads: dict[str, Any]) -> None:
    """Every DDL, and the many-types table's rows events: MariaDB decides when it starts a rows
    event, by its first row's size (the corpus's first row, a NULL, stays under the threshold).
    MariaDB writes rows events v1, so 169-171 are covered by the unit tests only."""
    types = _event_types(two_workloads["server"], two_workloads["zip"])
    assert types.get("Query_compressed", 0) > len(CASES), sorted(types.items())
    for kind in ("Write", "Update", "Delete"):
        assert types.get(f"{kind}_rows_compressed_v1", 0) >= 1, sorted(types.items())


@pytest.mark.parametrize("path", list(PATHS))
def test_each_path_reads_the_compressed_workload_as_the_plain_one(
    two_workloads: dict[str, Any], path: str
) -> None:
    w = two_workloads
    fast, framed = PATHS[path]
    plain, _ = _read(w["server"], w["plain"], w["start"], fast, framed)
    zipped, _ = _read(w["server"], w["zipped"], w["start"], fast, framed)
    assert len(plain) > 3 * len(CASES)
    assert zipped == plain  # row for row, column for column, with the values' Python types


class _ReaderThread:
    """The real reader in a thread; `error` is what ended it."""

    def __init__(self, setup: ReaderSetup, **overrides: object) -> None:
        settings = ReaderSettings(**setup.reader_settings(election=False, **overrides))
        self.reader = Reader(setup.source_connection(), settings, setup.services_for_reader())
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"reader-{setup.source}")

    def _run(self) -> None:
        try:
            self.reader.run(self.stop)
        except BaseException as exc:  # examined by the test
            self.error = exc

    def __enter__(self) -> _ReaderThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "reader thread did not stop within 30 s"


def _comparable(records: list[Record], schema: str) -> list[tuple[Any, ...]]:
    """One schema's row changes and DDLs in binlog order, without what names the database or
    the binlog position (the two workloads differ only there)."""
    mine = [r for r in records if isinstance(r, RowChange | DdlChange) and r.schema == schema]
    mine.sort(key=lambda r: (r.position.file, r.position.offset, r.txn.index if r.txn else 0))
    out: list[tuple[Any, ...]] = []
    for r in mine:
        if isinstance(r, RowChange):
            out.append(("row", r.op, r.table, r.primary_key, r.before, r.after))
        else:
            shape = r.table_schema
            columns = (shape.columns, shape.primary_key) if shape is not None else None
            statement = r.statement.replace(schema, "<db>")  # CREATE DATABASE names it
            out.append(("ddl", r.table, statement, r.kind, r.sql_mode, columns))
    return out


@pytest.mark.parametrize("path", list(PATHS))
def test_the_real_reader_publishes_the_same_records_with_compression_on_as_off(
    two_workloads: dict[str, Any],
    reader_setup: ReaderSetup,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    w = two_workloads
    fast, framed = PATHS[path]
    monkeypatch.setattr(binlog, "FRAMED", framed)
    if not fast:
        monkeypatch.setattr(fastrows, "AVAILABLE", False)
    file, pos = w["start"]
    topic = TopicReader(reader_setup.services, reader_setup.data_topic)
    schemas = [w["plain"], w["zipped"]]

    def both_read(records: list[Record]) -> bool:
        """Both workloads' last rows are there, and as many records of one as of the other
        (a poll can end before every partition's end: the records are then read on)."""
        done = {r.schema for r in records if isinstance(r, RowChange) and r.table == "done"}
        plain, zipped = _comparable(records, schemas[0]), _comparable(records, schemas[1])
        return done == set(schemas) and len(plain) == len(zipped)

    try:
        with _ReaderThread(reader_setup, start=f"file:{file}:{pos}", include_schemas=schemas) as r:
            topic.until(
                lambda rs: both_read(rs) or r.error is not None,
                timeout=240,
                what="both workloads' records to be published",
            )
        assert r.error is None, r.error
        records = [rec for _, _, _, rec in topic.records]
    finally:
        topic.close()
    plain = _comparable(records, w["plain"])
    zipped = _comparable(records, w["zipped"])
    # CREATE DATABASE, the many-types table's CREATE and ALTER, the corpus, the end marker.
    assert len({c[2] for c in plain if c[0] == "ddl"}) == len(CASES) + 4
    assert sum(1 for c in plain if c[0] == "row") > 3 * len(CASES)
    assert zipped == plain


def _binlog_file(server: MySQLSettings, name: str) -> Path:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.log_bin_basename")
        row = cur.fetchone()
    assert row is not None
    return Path(str(row[0])).parent / name


def test_a_corrupted_compressed_event_of_the_server_stops_every_path(
    two_workloads: dict[str, Any],
) -> None:
    """The server's own bytes of a compressed rows event (read from its binlog file): as they
    are, they inflate into the plain event; with a zlib byte flipped (and the checksum made
    right again, so only the payload is wrong) every path stops at the event's position."""
    w = two_workloads
    file, start = w["zip"]
    with connect(w["server"]) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {start}")
        found = next(r for r in cur.fetchall() if r[2] == "Write_rows_compressed_v1")
    at, end = int(found[1]), int(found[4])
    data = _binlog_file(w["server"], file).read_bytes()[at:end]
    payload = b"\x00" + data
    assert payload[5] == 166
    assert compressed.inflate(payload, checksum=True)[5] == 23
    body = bytearray(data[:-4])
    body[-3] ^= 0xFF  # inside the zlib stream's adler32 or its last block
    broken = b"\x00" + bytes(body) + zlib.crc32(bytes(body)).to_bytes(4, "little")
    for path in ("framed", "native", "pure", "transaction-scan"):
        kwargs: dict[str, Any] = (
            {"only_events": binlog.TRANSACTION_EVENTS}
            if path == "transaction-scan"
            else {"fast": PATHS[path][0], "framed": PATHS[path][1]}
        )
        stream = _Replay([_first(True), broken], True, **kwargs)
        try:
            with pytest.raises(CorruptBinlogError) as stopped:
                list(stream.events())
        finally:
            stream.close()
        assert str(stopped.value).startswith(f"{FILE}:{end}: Write_rows_compressed_v1"), (
            path,
            str(stopped.value),
        )
