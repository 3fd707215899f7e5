"""A session may override `binlog_row_image`: rows written with MINIMAL or NOBLOB lack columns,
and a consumer would take the missing ones for NULLs (NOBLOB: an unchanged blob overwritten with
NULL at the sink). Every decoding path refuses such a rows event in one line naming the binlog
position, the table and the missing columns; whole images on the same stream pass."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.producer.assembler import Rows
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.tables import TableFilter
from tests.conftest import connect
from tests.integration.producer.test_fastpath import _binlog_end, _stream

CASES = {
    # session image, statement, columns the image lacks
    "minimal-update": (
        "MINIMAL",
        "UPDATE t SET a = a + 1 WHERE id = 1",
        "before image lacks a, b, t, bl; after image lacks id, b, t, bl",
    ),
    "minimal-delete": ("MINIMAL", "DELETE FROM t WHERE id = 2", "image lacks a, b, t, bl"),
    "noblob-update": (
        "NOBLOB",
        "UPDATE t SET b = 'changed' WHERE id = 1",
        "before image lacks t, bl; after image lacks t, bl",
    ),
}
PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}


@pytest.fixture
def database(services: Settings) -> Iterator[tuple[MySQLSettings, str]]:
    server = services.sources[0]
    name = f"img_{uuid.uuid4().hex[:8]}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(
            f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, a INT, b VARCHAR(10), t TEXT, bl BLOB)"
        )
        cur.execute(f"CREATE TABLE `{name}`.plain (id INT PRIMARY KEY, a INT)")
    try:
        yield server, name
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _decode_all(stream: BinlogStream, decoded: list[str]) -> None:
    for event in stream.events():
        if isinstance(event, Rows):
            event.decode()
            decoded.append(f"{event.op.value} {event.table.table}")


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_partial_row_image_is_refused_in_one_line(
    database: tuple[MySQLSettings, str], case: str, path: str
) -> None:
    server, db = database
    image, statement, missing = CASES[case]
    start = _binlog_end(server)
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1, 'x', 'text', 'blob'), (2, 2, 'y', 't2', 'b2')")
        cur.execute(f"SET SESSION binlog_row_image = '{image}'")
        # An insert of every column is whole under MINIMAL, a table without blobs under
        # NOBLOB: it must pass.
        cur.execute("INSERT INTO plain VALUES (1, 1)")
        cur.execute(statement)
    fast, framed = PATHS[path]
    stream = _stream(server, start, TableFilter(include_schemas=[db]), fast, framed)
    decoded: list[str] = []
    try:
        with pytest.raises(ServerMisconfiguredError) as refused:
            _decode_all(stream, decoded)
    finally:
        stream.close()
    text = str(refused.value)
    assert "\n" not in text
    assert f"{db}.t: the row's {missing}: " in text, text
    assert "binlog_row_image=FULL" in text and "binlog." in text.split(":")[0], text
    assert decoded == ["insert t", "insert plain"]
