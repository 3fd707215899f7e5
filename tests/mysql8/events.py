"""MySQL 8.4 binlog events, built byte by byte from MySQL's documented formats.

Sources of the formats (read, not copied): the MySQL source documentation of
``libs/mysql/binlog/event`` (``binlog_event.h``, ``control_events.h``, ``rows_event.h``,
``statement_events.h``) and the client/server protocol pages. Every event has the v4 header
(timestamp, type, server id, size, end position, flags) and, as binlog_checksum=CRC32 has it,
a CRC32 of header and body at its end. Positions are decided by `tests.mysql8.binlog`,
which lays events out in files; here an event is built for a given end position.
"""

from __future__ import annotations

import struct
import uuid as uuidlib
import zlib

QUERY, STOP, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP = 2, 3, 4, 15, 16, 19
HEARTBEAT, WRITE_ROWS, UPDATE_ROWS, DELETE_ROWS, GTID = 27, 30, 31, 32, 33
PREVIOUS_GTIDS, TRANSACTION_PAYLOAD, GTID_TAGGED = 35, 40, 42
ARTIFICIAL = 0x20
"""LOG_EVENT_ARTIFICIAL_F: an event the server made up for the dump (the first Rotate)."""
HEADER = 19
CHECKSUM_CRC32 = 1
SERVER_VERSION = "8.4.3"
EVENT_TYPES = 42
"""How many event types the 8.4 Format_description describes (post-header lengths)."""
_POST_HEADER = {
    1: 56,  # Start_v3
    2: 13,  # Query
    4: 8,  # Rotate
    9: 4,  # Append_block
    11: 4,  # Delete_file
    15: 2 + 50 + 4 + 1 + EVENT_TYPES,  # Format_description
    17: 4,  # Begin_load_query
    18: 26,  # Execute_load_query
    19: 8,  # Table_map
    26: 2,  # Incident
    30: 10,  # Write_rows (v2)
    31: 10,
    32: 10,
    33: 42,  # Gtid
    34: 42,  # Anonymous_gtid
    36: 18,  # Transaction_context
    37: 52,  # View_change
    39: 10,  # Partial_update_rows
    40: 40,  # Transaction_payload
}
"""Post-header lengths the Format_description declares, by type; the others are 0 (8.4 lists
the v1 rows events and the pre-5.0 kinds with 0)."""


def lenenc(n: int) -> bytes:
    """A length-encoded integer (protocol: 1, 3, 4 or 9 bytes)."""
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def lenenc_str(data: bytes) -> bytes:
    return lenenc(len(data)) + data


def event(
    kind: int,
    body: bytes,
    end: int,
    timestamp: int = 1_700_000_000,
    server_id: int = 1,
    flags: int = 0,
    checksum: bool = True,
) -> bytes:
    """One event as it sits in the binlog file: header, body, CRC32."""
    size = HEADER + len(body) + (4 if checksum else 0)
    header = struct.pack("<IBIIIH", timestamp, kind, server_id, size, end, flags)
    data = header + body
    if checksum:
        data += struct.pack("<I", zlib.crc32(data))
    return data


def with_end(data: bytes, end: int, checksum: bool = True) -> bytes:
    """The same event with another end position (the checksum recomputed)."""
    body = data[:13] + struct.pack("<I", end) + data[17 : len(data) - (4 if checksum else 0)]
    if checksum:
        body += struct.pack("<I", zlib.crc32(body))
    return body


def format_description(end: int, created: int = 0) -> bytes:
    post = bytes(_POST_HEADER.get(i, 0) for i in range(1, EVENT_TYPES + 1))
    body = struct.pack("<H", 4) + SERVER_VERSION.encode().ljust(50, b"\x00")
    body += struct.pack("<IB", created, HEADER) + post + bytes([CHECKSUM_CRC32])
    return event(FORMAT_DESCRIPTION, body, end)


def rotate(next_file: str, position: int, end: int, artificial: bool = False) -> bytes:
    body = struct.pack("<Q", position) + next_file.encode()
    if artificial:  # the dump's first event: no timestamp, no position of its own
        return event(ROTATE, body, 0, timestamp=0, flags=ARTIFICIAL)
    return event(ROTATE, body, end)


def heartbeat(file: str, position: int) -> bytes:
    """Heartbeat_log_event (v1, what a replica that sets @master_heartbeat_period gets): the
    position the source has sent up to in the header, the file name as the body."""
    return event(HEARTBEAT, file.encode(), position, timestamp=0)


def sid(text: str) -> bytes:
    return uuidlib.UUID(text).bytes


def previous_gtids(intervals: dict[str, list[tuple[int, int]]], end: int) -> bytes:
    """Previous_gtids_log_event, untagged encoding: n_sids, then per sid its uuid and its
    intervals [start, end) as 8-byte integers."""
    body = struct.pack("<Q", len(intervals))
    for text, spans in sorted(intervals.items()):
        body += sid(text) + struct.pack("<Q", len(spans))
        for lo, hi in spans:
            body += struct.pack("<QQ", lo, hi + 1)
    return event(PREVIOUS_GTIDS, body, end)


def _commit_stamp(micros: int, more: bool) -> bytes:
    """7 bytes of a commit timestamp; the top bit says the original one follows."""
    return (micros | (1 << 55) if more else micros).to_bytes(7, "little")


def gtid(
    source: str,
    gno: int,
    end: int,
    sequence: int,
    length: int,
    commit_us: int,
    timestamp: int,
) -> bytes:
    """Gtid_log_event as MySQL 8.0.2+ writes it (untagged): flags, sid, gno, logical clock
    (type 2, last_committed, sequence_number), immediate and original commit timestamps,
    the transaction length (packed), immediate and original server versions."""
    body = bytes([0]) + sid(source) + struct.pack("<QB", gno, 2)
    body += struct.pack("<QQ", sequence - 1, sequence)
    body += _commit_stamp(commit_us, True) + _commit_stamp(commit_us, False)
    body += _packed(length)
    version = 80403
    body += struct.pack("<I", version | (1 << 31)) + struct.pack("<I", version)
    return event(GTID, body, end, timestamp=timestamp)


def _packed(n: int) -> bytes:
    """net_field_length (the binlog's length-encoded integer)."""
    return lenenc(n)


def _varlen(n: int) -> bytes:
    """An unsigned integer in the serialization library's variable-length form (8.3+): the
    count of trailing one bits in the first byte is how many bytes follow; the value, shifted
    left past that marker, is little-endian across the bytes."""
    for size in range(1, 9):
        if n < 1 << (7 * size):
            value = (n << size) | ((1 << (size - 1)) - 1)
            return value.to_bytes(size, "little")
    return b"\xff" + n.to_bytes(8, "little")


def _varlen_signed(n: int) -> bytes:
    """A signed integer: zigzag (sign in the lowest bit), then `_varlen`."""
    return _varlen((n << 1) if n >= 0 else ((-n - 1) << 1) | 1)


def gtid_tagged(
    source: str,
    tag: str,
    gno: int,
    end: int,
    sequence: int,
    length: int,
    commit_us: int,
    timestamp: int,
) -> bytes:
    """Gtid_tagged_log_event (MySQL 8.3+), written by the serialization library: the format
    version (1), the message's size (all of it, these numbers included) and its last
    non-ignorable field id (0), then each field as its id and value: flags, the uuid (16
    variable-length bytes), the number, the tag (length and bytes), last_committed and
    sequence_number (signed), the immediate commit timestamp, the transaction length, the
    immediate server version; fields equal to their defaults (original timestamp and server
    version equal to the immediate ones, the commit group ticket) are left out. This layout
    was checked against a Percona Server 8.4.11 event body published with a go-mysql-based
    project's tests (GTID ``77d1902c-…:test_tag:1``), which `rowbus.producer.tagged` reads."""
    version = 80403
    fields: list[tuple[int, bytes]] = [
        (0, _varlen(0)),
        (1, b"".join(_varlen(b) for b in sid(source))),
        (2, _varlen_signed(gno)),
        (3, _varlen(len(tag)) + tag.encode()),
        (4, _varlen_signed(sequence - 1)),
        (5, _varlen_signed(sequence)),
        (6, _varlen(commit_us)),
        (8, _varlen(length)),
        (9, _varlen(version)),
    ]
    payload = b"".join(_varlen(i) + f for i, f in fields)
    head = _varlen(1)
    tail = _varlen(0)  # the last non-ignorable field id
    rest = len(head) + len(tail) + len(payload)
    size = rest + len(_varlen(rest))
    size = rest + len(_varlen(size))  # the size counts its own bytes (settled in two steps)
    message = head + _varlen(size) + tail + payload
    return event(GTID_TAGGED, message, end, timestamp=timestamp)


SQL_MODE_DEFAULT = 0x4_0000_0000 | 0x2_0000_0000 | 0x8000_0000 | 0x400_0000 | 0x200_0000 | 0x20_0000
"""ONLY_FULL_GROUP_BY, STRICT_TRANS_TABLES, NO_ZERO_IN_DATE, NO_ZERO_DATE,
ERROR_FOR_DIVISION_BY_ZERO, NO_ENGINE_SUBSTITUTION (8.4's default) as binlog bits."""


def query(statement: str, schema: str, end: int, timestamp: int, sql_mode: int = 0) -> bytes:
    """Query_log_event: thread id, exec time, schema length, error code, status variables
    (flags2, sql_mode, catalog, charset client/connection/server as utf8mb4_0900_ai_ci,
    the table-map-for-update bits are not written for BEGIN/COMMIT/DDL), schema, statement."""
    status = struct.pack("<BI", 0, 0)  # Q_FLAGS2_CODE
    status += struct.pack("<BQ", 1, sql_mode)  # Q_SQL_MODE_CODE
    status += b"\x06\x03std"  # Q_CATALOG_NZ_CODE
    status += struct.pack("<BHHH", 4, 255, 255, 255)  # Q_CHARSET_CODE
    db = schema.encode()
    body = struct.pack("<IIBHH", 7, 0, len(db), 0, len(status)) + status + db + b"\x00"
    return event(QUERY, body + statement.encode(), end, timestamp=timestamp)


def xid(number: int, end: int, timestamp: int) -> bytes:
    return event(XID, struct.pack("<Q", number), end, timestamp=timestamp)
