"""Binlog events built byte by byte from MySQL's documented formats, and fed through the same
library parsing and reader translation a live stream goes through (no MySQL 8 server runs here).

Formats: the v4 event header (timestamp, type, server id, size, next position, flags), the
Table_map event with its optional metadata (MySQL 8, binlog_row_metadata=FULL), the v2 Rows
events, and MySQL's binary JSON.
"""

from __future__ import annotations

import struct
from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import NotImplementedEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import PartialUpdateRowsEvent, TableMapEvent, WriteRowsEvent

TABLE_MAP, WRITE_ROWS_V2, PARTIAL_UPDATE_ROWS, TRANSACTION_PAYLOAD = 19, 30, 39, 40
LONG, JSON_TYPE, TIME2 = 3, 245, 19
TABLE_ID = 77


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    return b"\xfd" + n.to_bytes(3, "little")


def event(kind: int, body: bytes, position: int = 1000) -> bytes:
    """The packet the server sends: the OK byte, the 19-byte header, the body (no checksum)."""
    header = struct.pack("<IBIIIH", 1_700_000_000, kind, 1, 19 + len(body), position, 0)
    return b"\x00" + header + body


def table_map(
    columns: list[tuple[str, int, bytes]], schema: str = "shop", table: str = "t"
) -> bytes:
    """A Table_map event with FULL optional metadata: (name, type, type metadata) per column;
    the first column is the primary key."""
    n = len(columns)
    body = TABLE_ID.to_bytes(6, "little") + b"\x01\x00"
    body += bytes([len(schema)]) + schema.encode() + b"\x00"
    body += bytes([len(table)]) + table.encode() + b"\x00"
    body += lenenc(n) + bytes(t for _, t, _ in columns)
    meta = b"".join(m for _, _, m in columns)
    body += lenenc(len(meta)) + meta
    body += bytes((n + 7) // 8 * [0xFF])  # every column nullable
    numeric = sum(1 for _, t, _ in columns if t == LONG)
    signedness = bytes((numeric + 7) // 8)  # all signed
    names = b"".join(lenenc(len(c)) + c.encode() for c, _, _ in columns)
    for kind, value in ((1, signedness), (4, names), (8, lenenc(0))):
        body += bytes([kind]) + lenenc(len(value)) + value
    return event(TABLE_MAP, body)


def write_rows(values: list[bytes], kind: int = WRITE_ROWS_V2) -> bytes:
    """A v2 Rows event with one row whose columns are all present and not NULL."""
    n = len(values)
    body = TABLE_ID.to_bytes(6, "little") + b"\x01\x00" + b"\x02\x00"  # flags, extra length
    body += lenenc(n) + bytes((n + 7) // 8 * [0xFF])
    if kind == PARTIAL_UPDATE_ROWS:
        body += bytes((n + 7) // 8 * [0xFF])  # after-image columns
        body += bytes((n + 7) // 8) + b"".join(values)  # before image
        body += lenenc(0)  # binlog_row_value_options of the after image: no partial JSON
    body += bytes((n + 7) // 8) + b"".join(values)
    return event(kind, body)


class _Ctl:
    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mysql"


ALLOWED = frozenset({TableMapEvent, WriteRowsEvent, PartialUpdateRowsEvent, NotImplementedEvent})


def parse(raw: bytes, table_map_cache: dict[int, Any]) -> Any:
    """The library's event for `raw`, parsed as a stream reader parses it (MySQL 8.0.36)."""
    packet = MysqlPacket(raw, "utf8mb4")
    wrapper = BinLogPacketWrapper(
        packet,
        table_map_cache,
        _Ctl(),
        (8, 0, 36),
        False,
        ALLOWED,
        None,
        None,
        None,
        None,
        False,
        False,
        False,
        True,
        False,
    )
    return wrapper.event


# --- MySQL binary JSON ---------------------------------------------------------------------

J_SMALL_OBJECT, J_SMALL_ARRAY, J_LITERAL, J_INT16, J_INT32, J_DOUBLE, J_STRING = (
    0,
    2,
    4,
    5,
    7,
    11,
    12,
)


def jsonb_string(text: str) -> bytes:
    data = text.encode()
    return _varlen(len(data)) + data


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def jsonb_container(items: list[tuple[str | None, int, bytes]], is_object: bool) -> bytes:
    """A small object or array: (key or None, type, value bytes); int16 and literals inline."""
    n = len(items)
    header_size = 4 + (4 * n if is_object else 0) + 3 * n
    keys = b"".join(k.encode() for k, _, _ in items if k is not None)
    offset = header_size
    key_entries = b""
    for k, _, _ in items:
        if k is not None:
            key_entries += struct.pack("<HH", offset, len(k.encode()))
            offset += len(k.encode())
    value_entries = b""
    blobs = b""
    for _, t, v in items:
        if t in (J_LITERAL, J_INT16):
            value_entries += bytes([t]) + v.ljust(2, b"\0")
        else:
            value_entries += bytes([t]) + struct.pack("<H", offset)
            blobs += v
            offset += len(v)
    body = key_entries + value_entries + keys + blobs
    return struct.pack("<HH", n, 4 + len(body)) + body
