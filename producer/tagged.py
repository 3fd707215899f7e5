"""MySQL 8.3+'s tagged GTID event (Gtid_tagged_log_event, type 42) read: ``uuid:tag:N``.

A transaction run with ``gtid_next='AUTOMATIC:<tag>'`` (or a tagged GTID) is announced by this
event instead of the Gtid event. Its body is written by MySQL's serialization library
(libs/mysql/serialization): a format version, the message's size and the id of its last
non-ignorable field, each a variable-length integer, then fields, each its id and its value.
A variable-length unsigned integer takes 1-9 bytes: the number of trailing one bits of the
first byte, plus one, is its byte count, and the value is the little-endian bytes shifted right
by that count (9 bytes: 0xFF, then 8 bytes as they are); a signed one is zigzag-encoded (the
sign in the lowest bit). Fields 0-3 are the flags, the source uuid (16 variable-length bytes),
the number (signed) and the tag (a length, then its bytes); later fields (logical clock,
commit timestamps, length, server versions) are not needed here and not read. mysql-replication
has no class for this event; `rowbus.producer.binlog` reads it with `gtid`.
"""

from __future__ import annotations

import uuid as uuidlib

GTID_TAGGED = 42
_UUID, _GNO, _TAG = 1, 2, 3


class TaggedGtidError(ValueError):
    """A tagged GTID event whose body is not the format above."""


def _varlen(data: bytes, p: int) -> tuple[int, int]:
    """The unsigned variable-length integer at `p` and the position after it."""
    if p >= len(data):
        raise TaggedGtidError("the event ends inside a number")
    first = data[p]
    if first == 0xFF:
        size = 9
        if p + size > len(data):
            raise TaggedGtidError("the event ends inside a number")
        return int.from_bytes(data[p + 1 : p + 9], "little"), p + 9
    size = 1
    while first & 1:
        first >>= 1
        size += 1
    if p + size > len(data):
        raise TaggedGtidError("the event ends inside a number")
    return int.from_bytes(data[p : p + size], "little") >> size, p + size


def _signed(value: int) -> int:
    return -(value >> 1) - 1 if value & 1 else value >> 1


def gtid(body: bytes) -> str:
    """``uuid:tag:N`` of a tagged GTID event's body (after the 19-byte header, without the
    checksum). A body without a tag gives ``uuid:N``."""
    _, p = _varlen(body, 0)  # format version
    size, p = _varlen(body, p)
    _, p = _varlen(body, p)  # last non-ignorable field id
    end = min(size, len(body))
    source: bytes | None = None
    gno: int | None = None
    tag = ""
    for _ in range(64):
        if p >= end or (source is not None and gno is not None and tag):
            break
        field, p = _varlen(body, p)
        if field == 0:
            _, p = _varlen(body, p)
        elif field == _UUID:
            out = bytearray()
            for _ in range(16):
                byte, p = _varlen(body, p)
                out.append(byte & 0xFF)
            source = bytes(out)
        elif field == _GNO:
            raw, p = _varlen(body, p)
            gno = _signed(raw)
        elif field == _TAG:
            length, p = _varlen(body, p)
            tag = body[p : p + length].decode("ascii", "replace").lower()
            p += length
        else:
            break  # the fields after the tag are not needed
    if source is None or gno is None or gno <= 0:
        raise TaggedGtidError("the event has no source uuid or transaction number")
    text = str(uuidlib.UUID(bytes=source))
    return f"{text}:{tag}:{gno}" if tag else f"{text}:{gno}"
