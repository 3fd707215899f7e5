"""MySQL 8 on the reader's code path, at the event level: binary JSON arrives as its text,
negative fractional TIME2 as itself. (Compressed transactions and partial JSON updates stop the
reader: `test_event_types.py`.)"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Any

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import Rows
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.jsonb import json_text
from rowbus.producer.tables import TableFilter
from tests.unit.producer.mysql8_events import (
    J_DOUBLE,
    J_INT16,
    J_LITERAL,
    J_SMALL_ARRAY,
    J_SMALL_OBJECT,
    J_STRING,
    JSON_TYPE,
    LONG,
    TIME2,
    jsonb_container,
    jsonb_string,
    parse,
    table_map,
    write_rows,
)

ARRAY = jsonb_container(
    [
        (None, J_INT16, struct.pack("<h", 1)),
        (None, J_DOUBLE, struct.pack("<d", 2.5)),
        (None, J_LITERAL, b"\x00"),
        (None, J_LITERAL, b"\x01"),
    ],
    is_object=False,
)
DOC = bytes([J_SMALL_OBJECT]) + jsonb_container(
    [("a", J_SMALL_ARRAY, ARRAY), ("b", J_STRING, jsonb_string('x"é'))], is_object=True
)
DOC_TEXT = '{"a": [1, 2.5, null, true], "b": "x\\"é"}'


def _stream() -> BinlogStream:
    return BinlogStream(
        SourceConnection(name="s", host="127.0.0.1", port=1, user="u", password="p"),
        1,
        "binlog.000001",
        4,
        TableFilter(),
    )


def _time2_fsp6(us: int) -> bytes:
    """TIME2(6): the packed value (h:m:s << 24 | µs, negated for a negative TIME) plus 2**47."""
    a = abs(us)
    secs, frac = divmod(a, 1_000_000)
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    packed = ((h << 12) | (m << 6) | s) << 24 | frac
    return ((-packed if us < 0 else packed) + (1 << 47)).to_bytes(6, "big")


def _row(stream: BinlogStream, cache: dict[int, Any], values: list[bytes]) -> tuple[Any, ...]:
    out = stream._translate(parse(write_rows(values), cache))
    assert isinstance(out, Rows)
    ((before, after),) = out.decode()
    assert before is None and after is not None
    return after


def test_binary_json_and_negative_time2_of_a_mysql8_row_arrive_as_the_server_has_them() -> None:
    cache: dict[int, Any] = {}
    stream = _stream()
    columns = [("id", LONG, b""), ("doc", JSON_TYPE, b"\x04"), ("t", TIME2, b"\x06")]
    stream._translate(parse(table_map(columns), cache))
    doc = len(DOC).to_bytes(4, "little") + DOC
    for us in (-250_000, -(838 * 3600 + 59 * 60 + 59) * 1_000_000 - 999_999, 1, -1):
        after = _row(stream, cache, [struct.pack("<i", 7), doc, _time2_fsp6(us)])
        assert after == (7, DOC_TEXT, dt.timedelta(microseconds=us))
        assert isinstance(after[1], str)  # mysql-replication gave a dict the encoder refused


def test_binary_json_scalars_and_opaque_values_print_as_mysql_prints_them() -> None:
    assert json_text(bytes([J_LITERAL, 1])) == "true"
    assert json_text(bytes([J_STRING]) + jsonb_string("")) == '""'
    assert json_text(bytes([J_DOUBLE]) + struct.pack("<d", 1e300)) == "1e300"
    assert json_text(bytes([J_DOUBLE]) + struct.pack("<d", 3.0)) == "3.0"
    assert json_text(bytes([9]) + struct.pack("<q", -(2**63))) == str(-(2**63))
    assert json_text(bytes([10]) + struct.pack("<Q", 2**64 - 1)) == str(2**64 - 1)
    empty = bytes([J_SMALL_ARRAY]) + jsonb_container([], is_object=False)
    assert json_text(empty) == "[]"
    # DECIMAL(5,2) -12.34 as an opaque value: precision, scale, then MySQL's decimal2bin.
    dec = bytes([5, 2]) + bytes([0x7F, 0xF3, 0xDD])
    assert json_text(bytes([15, 246, len(dec)]) + dec) == "-12.34"
