"""The value layer: binlog column bytes to `rowbus.protocol.values` values, where mysql-replication
(1.0.17) gets them wrong.

The library decodes each column in ``RowsEvent.__read_values_name``; `install` wraps that method
once so the types below are read here from the raw bytes, and every other type (integers,
DECIMAL, FLOAT/DOUBLE, ENUM, GEOMETRY) still goes through the library, which reads them right.
What the library gets wrong, and what this module does instead (PROTOCOL.md §2):

* TIME2: a negative value with a fraction is mirrored (``-00:00:00.25`` read as ``-00:00:00.75``):
  the stored value is one fixed-point integer, decoded here as a whole.
* DATE, DATETIME2, TIMESTAMP2: zero dates (``0000-00-00``, ``2024-00-15``, a zero TIMESTAMP) came
  out as NULL or as 1970-01-01; they are `ZeroDate` values here, the text the server prints.
* YEAR 0000 came out as 1900: it is 0.
* SET: the empty set came out as NULL: it is ``frozenset()``. BIT: a ``'0101'`` string: an int.
* Strings: decoded by the column's charset as MySQL converts it to Unicode (its latin1 is
  cp1252 with the five bytes cp1252 leaves undefined mapped to U+0081.. 1:1; the library raised
  UnicodeDecodeError on them, at the same event forever). Binary collations give bytes, also
  when empty (the library gave ``''``), and BINARY(n) is padded with zero bytes to n as the server
  stores and returns it (the binlog strips them).
* JSON (MySQL 8's binary JSON, type 245): the library returned a dict; it is its text here
  (`rowbus.producer.jsonb`). MariaDB's JSON is a LONGTEXT and arrives as text anyway. In a
  Partial_update_rows event (binlog_row_value_options=PARTIAL_JSON) the JSON columns are read
  by the event's `rowbus.producer.jsondiff.PartialRow`, which makes diffs whole.
"""

from __future__ import annotations

import codecs
import datetime as dt
from collections.abc import Callable
from typing import Any

from pymysql.charset import charset_by_name
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from rowbus.producer.jsonb import json_text
from rowbus.protocol.values import Value, ZeroDate

Reader = Callable[[Any], Value]
"""Reads one non-NULL value of a column from the library's packet."""

_FRAC_UNIT = {0: 0, 1: 10_000, 2: 100, 3: 1}  # µs per stored unit, by fraction byte count
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_TWO_BYTE_LENGTH = 255  # CHAR/VARCHAR whose max byte length exceeds this have a 2-byte length

# MySQL's latin1 is cp1252, except that the five bytes cp1252 leaves undefined map 1:1 to the
# C1 controls (strings/ctype-latin1.c): decode as ISO-8859-1, then move 0x80..0x9F to cp1252.
_LATIN1_FIX = {
    b: ch for b in range(0x80, 0xA0) for ch in [bytes([b]).decode("cp1252", "ignore")] if ch
}
_LATIN1_TABLE = str.maketrans({chr(b): ch for b, ch in _LATIN1_FIX.items()})

# MySQL charset name -> Python codec, where pymysql's table does not say it right.
_CODECS = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "ascii": "ascii",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "gb18030": "gb18030",
}


class UnsupportedCharsetError(ValueError):
    """A column's charset has no Python codec: its text cannot be reproduced."""


def charset_of(column: Any) -> str | None:
    """The MySQL charset name of a column (``binary`` for binary collations), from FULL
    metadata; None for a column without one."""
    collation = getattr(column, "collation_name", None)
    if not collation:
        return None
    return "binary" if collation == "binary" else str(collation).split("_", 1)[0]


def text_decoder(charset: str) -> Callable[[bytes], str]:
    """How MySQL turns bytes of `charset` into Unicode; UnsupportedCharsetError if Python has
    no codec for it."""
    if charset == "latin1":
        return lambda b: b.decode("latin-1").translate(_LATIN1_TABLE)
    name = _CODECS.get(charset)
    if name is None:
        found = charset_by_name(charset)
        name = found.encoding if found is not None else charset
    try:
        codecs.lookup(name)
    except LookupError:
        raise UnsupportedCharsetError(charset) from None
    return lambda b: b.decode(name)


def _be(packet: Any, n: int) -> int:
    """An unsigned big-endian integer of `n` bytes."""
    return int.from_bytes(packet.read(n), "big")


def _fraction(packet: Any, fsp: int) -> int:
    """Microseconds of a DATETIME2/TIMESTAMP2 fraction (never negative)."""
    n = (fsp + 1) // 2
    return _be(packet, n) * _FRAC_UNIT[n] if n else 0


def _zero_text(y: int, m: int, d: int, clock: tuple[int, int, int, int] | None, fsp: int) -> str:
    text = f"{y:04d}-{m:02d}-{d:02d}"
    if clock is not None:
        hh, mi, ss, us = clock
        text += f" {hh:02d}:{mi:02d}:{ss:02d}"
        if fsp:
            text += "." + f"{us:06d}"[:fsp]
    return text


def _date(packet: Any) -> Value:
    v = packet.read_uint24()
    y, m, d = v >> 9, (v >> 5) & 15, v & 31
    try:
        return dt.date(y, m, d)
    except ValueError:
        return ZeroDate(_zero_text(y, m, d, None, 0))


def _datetime2(fsp: int) -> Reader:
    def read(packet: Any) -> Value:
        v = _be(packet, 5) - 0x80_0000_0000
        us = _fraction(packet, fsp)
        ymd, hms = v >> 17, v & 0x1FFFF
        ym, d = ymd >> 5, ymd & 31
        y, m = divmod(ym, 13)
        hh, mi, ss = hms >> 12, (hms >> 6) & 63, hms & 63
        try:
            return dt.datetime(y, m, d, hh, mi, ss, us)
        except ValueError:
            return ZeroDate(_zero_text(y, m, d, (hh, mi, ss, us), fsp))

    return read


def _timestamp2(fsp: int) -> Reader:
    def read(packet: Any) -> Value:
        seconds = _be(packet, 4)
        us = _fraction(packet, fsp)
        if seconds == 0:  # 1970-01-01 00:00:00 UTC is below TIMESTAMP's range: the zero value
            return ZeroDate(_zero_text(0, 0, 0, (0, 0, 0, us), fsp))
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=us)

    return read


def _time2(fsp: int) -> Reader:
    """TIME2 is one big-endian fixed-point integer: 24 bits of packed h:m:s then the fraction
    bytes, offset by half the range. Negative values are the negated packed value as a whole
    (the fraction is not a separate positive field)."""
    n = (fsp + 1) // 2
    bits = 8 * n
    offset = 0x80_0000 << bits
    unit = _FRAC_UNIT[n]

    def read(packet: Any) -> Value:
        v = _be(packet, 3 + n) - offset
        a = -v if v < 0 else v
        packed, frac = a >> bits, a & ((1 << bits) - 1)
        hh, mi, ss = (packed >> 12) & 0x3FF, (packed >> 6) & 63, packed & 63
        us = ((hh * 60 + mi) * 60 + ss) * 1_000_000 + frac * unit
        return dt.timedelta(microseconds=-us if v < 0 else us)

    return read


def _year(packet: Any) -> Value:
    y: int = packet.read_uint8()
    return y + 1900 if y else 0


def _set(members: tuple[str, ...], size: int) -> Reader:
    def read(packet: Any) -> Value:
        mask = packet.read_uint_by_size(size)
        return frozenset(m for i, m in enumerate(members) if mask >> i & 1)

    return read


def _bit(size: int) -> Reader:
    return lambda packet: _be(packet, size)


def _string(column: Any, length_size: int, pad_to: int | None) -> Reader:
    charset = charset_of(column)
    if charset is None or charset == "binary":
        if pad_to:
            return lambda p: bytes(p.read_length_coded_pascal_string(length_size)).ljust(
                pad_to, b"\0"
            )
        return lambda p: bytes(p.read_length_coded_pascal_string(length_size))
    decode = text_decoder(charset)
    return lambda p: decode(bytes(p.read_length_coded_pascal_string(length_size)))


def _json(length_size: int) -> Reader:
    def read(packet: Any) -> Value:
        length = packet.read_uint_by_size(length_size)
        return json_text(bytes(packet.read(length))) if length else "null"

    return read


def reader_for(column: Any) -> Reader | None:
    """This module's reader for `column`, or None where the library's own is right."""
    t = column.type
    fsp = getattr(column, "fsp", 0) or 0
    if t == FIELD_TYPE.TIME2:
        return _time2(fsp)
    if t == FIELD_TYPE.DATETIME2:
        return _datetime2(fsp)
    if t == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(fsp)
    if t in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE):
        return _date
    if t == FIELD_TYPE.YEAR:
        return _year
    if t == FIELD_TYPE.SET:
        return _set(tuple(column.set_values or ()), column.size)
    if t == FIELD_TYPE.BIT:
        return _bit(column.bytes)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        return _string(column, 2 if column.max_length > _TWO_BYTE_LENGTH else 1, None)
    if t == FIELD_TYPE.STRING:
        size = 2 if column.max_length > _TWO_BYTE_LENGTH else 1
        return _string(column, size, column.max_length)
    if t == FIELD_TYPE.BLOB:
        return _string(column, column.length_size, None)
    if t == FIELD_TYPE.JSON:
        return _json(column.length_size)
    return None


_NOT_BUILT = object()
_JSON = FIELD_TYPE.JSON


def _read_value(
    self: Any,
    column: Any,
    null_bitmap: Any,
    null_bitmap_index: int,
    is_partial: bool,
    cols_bitmap: Any,
    unsigned: bool,
    i: int,
) -> Any:
    reader = column.__dict__.get("_rowbus_reader", _NOT_BUILT)
    if reader is _NOT_BUILT:
        reader = column.__dict__["_rowbus_reader"] = reader_for(column)
    if reader is None or is_partial:
        return _LIBRARY_READ(
            self, column, null_bitmap, null_bitmap_index, is_partial, cols_bitmap, unsigned, i
        )
    if not (cols_bitmap[i >> 3] >> (i & 7)) & 1:  # not in the image (binlog_row_image!=FULL)
        return None
    if null_bitmap[null_bitmap_index >> 3] >> (null_bitmap_index & 7) & 1:
        return None
    if column.type == _JSON:
        partial = self.__dict__.get("_rowbus_partial")
        if partial is not None:  # a Partial_update_rows event's row (`jsondiff`)
            return partial.read(self.packet, column.length_size, i)
    return reader(self.packet)


_LIBRARY_READ: Callable[..., Any] = RowsEvent._RowsEvent__read_values_name


def install() -> None:
    """Route the library's per-column decoding through `_read_value` (idempotent)."""
    RowsEvent._RowsEvent__read_values_name = _read_value
