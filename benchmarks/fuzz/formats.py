"""The fuzz targets' input formats: how one byte string becomes the arguments of a native
entry point. `seeds.py` writes real inputs in these formats; `targets.py` reads them. The first
byte of every input chooses the entry point of its extension."""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rowbus.producer.values import text_decoder
from rowbus.protocol.values import ZeroDate

# ---- _rows.decode ------------------------------------------------------------------------------

DECODE, SPLIT, CHANGE = 0, 1, 2
"""The `rows` target's entry points."""
COLUMN = struct.Struct("<BbhB")
"""A plan column: kind, a, b, and which object goes with it (`column_object`)."""
MAX_COLUMNS = 12
LATIN1 = text_decoder("latin1")


def column_object(kind: int, which: int) -> Any:
    """The plan's object of a column: SET members, ENUM values, a TEXT decoder or None."""
    if kind == 13:  # SET: up to 64 members
        return tuple(f"m{i}" for i in range(which % 65))
    if kind == 15:  # ENUM: None (the library's enum_values unknown) or '' plus members
        return None if which == 0 else ("", *(f"e{i}" for i in range(which)))
    if kind == 7:
        return LATIN1
    return None


@dataclass
class Decode:
    mode: int
    plan: tuple[tuple[int, int, int, Any], ...]
    present1: bytes
    present2: bytes | None
    body: bytes

    def encode(self) -> bytes:
        out = bytearray([DECODE, self.mode, len(self.plan)])
        for kind, a, b, _ in self.plan:
            out += COLUMN.pack(kind, a, b, _which(kind, _))
        out += self.present1 + (self.present2 or b"")
        return bytes(out + self.body)


def _which(kind: int, obj: Any) -> int:
    if kind == 13:
        return len(obj)
    if kind == 15:
        return 0 if obj is None else len(obj) - 1
    return 0


def read_decode(data: bytes) -> Decode | None:
    if len(data) < 3:
        return None
    mode, ncols = data[1] % 3, data[2] % (MAX_COLUMNS + 1)
    at = 3
    plan = []
    for _ in range(ncols):
        if len(data) < at + COLUMN.size:
            return None
        kind, a, b, which = COLUMN.unpack_from(data, at)
        at += COLUMN.size
        plan.append((kind % 17, a, b, column_object(kind % 17, which)))
    width = (ncols + 7) // 8
    present1 = data[at : at + width]
    at += width
    present2 = None
    if mode == 2:
        present2 = data[at : at + width]
        at += width
    return Decode(mode, tuple(plan), present1, present2, data[at:])


# ---- _rows.split_packets ---------------------------------------------------------------------


def encode_split(pos: int, buf: bytes) -> bytes:
    return bytes([SPLIT]) + pos.to_bytes(2, "little") + buf


def read_split(data: bytes) -> tuple[bytes, int]:
    buf = data[3:]
    return buf, int.from_bytes(data[1:3], "little") % (len(buf) + 1)


# ---- _rows.row_change / row_record: values from bytes ------------------------------------------

VALUE_TAGS = 14
"""None, int64, uint64, big int, float, str, non-UTF-8 str, bytes, Decimal, date, datetime,
aware datetime, timedelta, other (bool, frozenset)."""


# ---- _resultset.rows -------------------------------------------------------------------------


def encode_resultset(kinds: list[int], seq: int, split_at: int, buf: bytes) -> bytes:
    """A result: the column kinds, the first packet's sequence id, where the stream is cut in
    two reads (0: one read), the packets."""
    return bytes([len(kinds), *kinds, seq, split_at & 0xFF, split_at >> 8]) + buf


def read_resultset(data: bytes) -> tuple[list[int], int, int, bytes] | None:
    if not data:
        return None
    n = data[0] % (MAX_COLUMNS + 1)
    if len(data) < 1 + n + 3:
        return None
    kinds = list(data[1 : 1 + n])
    seq, cut = data[1 + n], int.from_bytes(data[2 + n : 4 + n], "little")
    return kinds, seq, cut, data[4 + n :]


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload


def lenenc(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


# ---- _literals -------------------------------------------------------------------------------

ROW_TEXT, RENDER = 0, 1
"""The `literals` target's entry points (ROW_TEXT also feeds `append_records`)."""


def encode_render(
    kinds: bytes,
    ints: list[int],
    uints: list[int],
    doubles: list[float],
    strings: list[str],
    blobs: list[bytes],
) -> bytes:
    out = bytearray([RENDER, len(kinds)]) + kinds
    out += bytes([len(ints), len(uints), len(doubles), len(strings), len(blobs)])
    for i in ints:
        out += struct.pack("<q", i)
    for u in uints:
        out += struct.pack("<Q", u)
    for d in doubles:
        out += struct.pack("<d", d)
    for s in (*(x.encode("utf-8", "surrogatepass") for x in strings), *blobs):
        out += bytes([min(len(s), 255)]) + s[:255]
    return bytes(out)


def read_render(data: bytes) -> tuple[Any, ...] | None:
    """(kinds, ints, uints, doubles, strings, blobs) or None when the input runs short."""
    if len(data) < 2:
        return None
    n = data[1]
    at = 2 + n
    kinds = data[2:at]
    if len(data) < at + 5:
        return None
    counts = data[at : at + 5]
    at += 5
    arrays: list[list[Any]] = []
    for fmt, count in zip(("<q", "<Q", "<d"), counts[:3], strict=True):
        if len(data) < at + 8 * count:
            return None
        arrays.append([struct.unpack_from(fmt, data, at + 8 * i)[0] for i in range(count)])
        at += 8 * count
    for which, count in ((3, counts[3]), (4, counts[4])):
        items: list[Any] = []
        for _ in range(count):
            if at >= len(data):
                return None
            size = data[at]
            raw = data[at + 1 : at + 1 + size]
            at += 1 + size
            # Strings as UTF-8 with lone surrogates kept: str that PyUnicode_AsUTF8 refuses.
            items.append(raw.decode("utf-8", "surrogateescape") if which == 3 else raw)
        arrays.append(items)
    return (kinds, *arrays)


class Cursor:
    """Reads the fuzz input left to right; runs out into zeros (never raises)."""

    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data, self.at = data, at

    def take(self, n: int) -> bytes:
        got = self.data[self.at : self.at + n]
        self.at += n
        return got.ljust(n, b"\x00")

    def byte(self) -> int:
        return self.take(1)[0]


def read_value(c: Cursor) -> Any:
    """One value of `VALUE_TAGS` kinds (see `write_value`)."""
    tag = c.byte() % VALUE_TAGS
    if tag == 0:
        return None
    if tag == 1:
        return struct.unpack("<q", c.take(8))[0]
    if tag == 2:
        return struct.unpack("<Q", c.take(8))[0]
    if tag == 3:
        return int.from_bytes(c.take(c.byte() % 24), "little", signed=True)
    if tag == 4:
        return struct.unpack("<d", c.take(8))[0]
    if tag in (5, 6, 7):
        raw = c.take(c.byte())
        return (
            raw if tag == 7 else raw.decode("utf-8", "surrogateescape" if tag == 6 else "replace")
        )
    if tag == 8:
        text = c.take(c.byte() % 80).decode("ascii", "replace")
        try:
            return Decimal(text)
        except ArithmeticError:
            return Decimal("NaN")
    if tag in (9, 10, 11):
        days = int.from_bytes(c.take(3), "little") % 3_652_059
        day = dt.date(1, 1, 1) + dt.timedelta(days=days)
        if tag == 9:
            return day
        us = int.from_bytes(c.take(5), "little") % 86_400_000_000
        at = dt.datetime.combine(day, dt.time()) + dt.timedelta(microseconds=us)
        if tag == 11:
            zone = c.byte()
            tz = dt.UTC if zone < 200 else dt.timezone(dt.timedelta(hours=zone % 24 - 12))
            return at.replace(tzinfo=tz)
        return at
    if tag == 12:
        us = struct.unpack("<q", c.take(8))[0]
        return dt.timedelta(microseconds=us % 10**14 - 5 * 10**13)
    return (True, frozenset({"a", "b"}), ZeroDate("0000-00-00"), 2**64)[c.byte() % 4]


def write_value(v: Any) -> bytes:
    """The bytes `read_value` reads back as `v` (for the values seeds use)."""
    if v is None:
        return b"\x00"
    if isinstance(v, (bool, frozenset, ZeroDate)):
        return bytes([13, 0 if v is True else 1 if isinstance(v, frozenset) else 2])
    if isinstance(v, int):
        if -(2**63) <= v < 2**63:
            return b"\x01" + struct.pack("<q", v)
        if 0 <= v < 2**64:
            return b"\x02" + struct.pack("<Q", v)
        raw = v.to_bytes(23, "little", signed=True)
        return bytes([3, 23]) + raw
    if isinstance(v, float):
        return b"\x04" + struct.pack("<d", v)
    if isinstance(v, str):
        raw = v.encode("utf-8", "surrogateescape")[:255]
        return bytes([5, len(raw)]) + raw
    if isinstance(v, bytes):
        return bytes([7, len(v[:255])]) + v[:255]
    if isinstance(v, Decimal):
        text = str(v).encode()[:79]
        return bytes([8, len(text)]) + text
    if isinstance(v, dt.datetime):
        days = (v.date() - dt.date(1, 1, 1)).days.to_bytes(3, "little")
        us = (v - dt.datetime.combine(v.date(), dt.time(), v.tzinfo)).total_seconds()
        raw = days + round(us * 1_000_000).to_bytes(5, "little")
        return (b"\x0b" + raw + b"\x00") if v.tzinfo else b"\x0a" + raw
    if isinstance(v, dt.date):
        return b"\x09" + (v - dt.date(1, 1, 1)).days.to_bytes(3, "little")
    if isinstance(v, dt.timedelta):
        us = (v.days * 86_400 + v.seconds) * 10**6 + v.microseconds + 5 * 10**13
        return b"\x0c" + struct.pack("<q", us)
    raise TypeError(f"no fuzz encoding for {type(v).__name__}")
