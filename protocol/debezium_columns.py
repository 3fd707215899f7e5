"""Debezium's rendering of one MySQL column (pure): the Connect schema of its field, the
converter of its values and the ``default`` of its schema, as Debezium 3.6's MySQL connector
with its default converters makes them (``decimal.handling.mode=precise``,
``time.precision.mode=adaptive_time_microseconds``, ``binary.handling.mode=bytes``,
``bigint.unsigned.handling.mode=long``). `rowbus.protocol.debezium` builds records from them.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from rowbus.protocol.events import ColumnSchema
from rowbus.protocol.values import (
    EPOCH_DATE_ORDINAL,
    EPOCH_NAIVE,
    ONE_US,
    Value,
    ZeroDate,
)

Json = dict[str, Any]
Convert = Callable[[Value], Any]


def _field(ctype: str, name: str | None = None, **params: str) -> Json:
    out: Json = {"type": ctype}
    if name is not None:
        out["name"] = name
        out["version"] = 1
    if params:
        out["parameters"] = params
    return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _wrap_long(v: Value) -> Any:
    assert isinstance(v, int)
    return v - (1 << 64) if v >= 1 << 63 else v


def _decimal_bytes(scale: int) -> Convert:
    def convert(v: Value) -> Any:
        assert isinstance(v, Decimal)
        # Exact at any precision (Decimal arithmetic would round to the context's 28 digits).
        sign, digits, exponent = v.as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
        unscaled = -unscaled if sign else unscaled
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return b64(unscaled.to_bytes(size, "big", signed=True))

    return convert


def _bits(length: int) -> Convert:
    size = (length + 7) // 8

    def convert(v: Value) -> Any:
        assert isinstance(v, int)
        return b64(v.to_bytes(size, "little"))

    return convert


def _date(v: Value) -> Any:
    if isinstance(v, ZeroDate):
        return None
    assert isinstance(v, dt.date)
    return v.toordinal() - EPOCH_DATE_ORDINAL


def _datetime_us(v: Value) -> Any:
    if isinstance(v, ZeroDate):
        return None
    assert isinstance(v, dt.datetime)
    return (v - EPOCH_NAIVE) // ONE_US


def _datetime_ms(v: Value) -> Any:
    us = _datetime_us(v)
    return None if us is None else us // 1000


def _zoned(fsp: int) -> Convert:
    def convert(v: Value) -> Any:
        if isinstance(v, ZeroDate):
            return None
        assert isinstance(v, dt.datetime)
        utc = v.astimezone(dt.UTC) if v.tzinfo is not None else v
        text = utc.strftime("%Y-%m-%dT%H:%M:%S")
        if fsp:
            text += f".{utc.microsecond:06d}"[: fsp + 1]
        return text + "Z"

    return convert


def _not_null(col: ColumnSchema, convert: Convert) -> Convert:
    """A NOT NULL DATE or DATETIME's converter: a zero date is the epoch (0), as Debezium
    writes it (null would break the field's non-optional schema)."""
    if col.nullable:
        return convert

    def epoch_for_zero(v: Value) -> Any:
        return 0 if isinstance(v, ZeroDate) else convert(v)

    return epoch_for_zero


def _time(v: Value) -> Any:
    assert isinstance(v, dt.timedelta)
    return v // ONE_US


def _set(v: Value) -> Any:
    assert isinstance(v, frozenset)
    return v


def _as_is(v: Value) -> Any:
    return v


def _bytes(v: Value) -> Any:
    assert isinstance(v, bytes)
    return b64(v)


def column_rendering(col: ColumnSchema) -> tuple[Json, Convert]:
    """The Connect schema of `col` (without ``field``/``optional``) and its value converter."""
    t = col.type
    if t == "tinyint" or (t == "smallint" and not col.unsigned):
        return _field("int16"), _as_is
    if t in ("smallint", "mediumint") or (t == "int" and not col.unsigned):
        return _field("int32"), _as_is
    if t == "int":
        return _field("int64"), _as_is
    if t == "bigint":
        return _field("int64"), _wrap_long if col.unsigned else _as_is
    if t == "float":
        return _field("float"), _float32
    if t == "double":
        return _field("double"), _as_is
    if t == "decimal":
        scale = col.scale or 0
        params = {"scale": str(scale)}
        if col.precision is not None:
            params["connect.decimal.precision"] = str(col.precision)
        out = _field("bytes", "org.apache.kafka.connect.data.Decimal", **params)
        return out, _decimal_bytes(scale)
    if t == "bit":
        length = col.length or 1
        if length == 1:
            return _field("boolean"), bool
        return _field("bytes", "io.debezium.data.Bits", length=str(length)), _bits(length)
    if t == "date":
        return _field("int32", "io.debezium.time.Date"), _not_null(col, _date)
    if t == "datetime":
        if (col.fsp or 0) <= 3:
            return _field("int64", "io.debezium.time.Timestamp"), _not_null(col, _datetime_ms)
        return _field("int64", "io.debezium.time.MicroTimestamp"), _not_null(col, _datetime_us)
    if t == "timestamp":
        return _field("string", "io.debezium.time.ZonedTimestamp"), _zoned(col.fsp or 0)
    if t == "time":
        return _field("int64", "io.debezium.time.MicroTime"), _time
    if t == "year":
        return _field("int32", "io.debezium.time.Year"), _as_is
    if t == "enum":
        return _field("string", "io.debezium.data.Enum", allowed=",".join(col.elements)), _as_is
    if t == "set":
        allowed = ",".join(col.elements)
        order = {m: i for i, m in enumerate(col.elements)}

        def members(v: Value) -> Any:
            assert isinstance(v, frozenset)
            return ",".join(sorted(v, key=lambda m: order.get(m, len(order))))

        return _field("string", "io.debezium.data.EnumSet", allowed=allowed), members
    if t == "json":  # MySQL's JSON; MariaDB's is a LONGTEXT, a plain string to Debezium too
        return _field("string", "io.debezium.data.Json"), _as_is
    if t == "geometry":
        return dict(_GEOMETRY), _geometry
    if t in ("binary", "varbinary") or t.endswith("blob"):
        return _field("bytes"), _bytes
    return _field("string"), _string


_GEOMETRY: Json = {
    "type": "struct",
    "fields": [
        {"type": "bytes", "optional": False, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ],
    "name": "io.debezium.data.geometry.Geometry",
    "version": 1,
    "doc": "Geometry",
}
"""Debezium's spatial struct. (A POINT column is Debezium's ``Point``, with ``x`` and ``y``
too; the binlog's table map says GEOMETRY for every spatial column, so rowbus cannot tell.)"""


def _geometry(v: Value) -> Any:
    """MySQL's spatial value (4 bytes of SRID, little-endian, then the WKB) as Debezium's
    ``{wkb, srid}`` (srid null when 0)."""
    assert isinstance(v, bytes)
    srid = int.from_bytes(v[:4], "little")
    return {"wkb": b64(v[4:]), "srid": srid or None}


def _float32(v: Value) -> Any:
    """A FLOAT as Java prints a float: the shortest decimal that reads back as the same
    binary32 value (0.1, not 0.10000000149011612, which is its binary64 widening)."""
    assert isinstance(v, float)
    want = struct.pack("<f", v)
    # Java 17's Float.toString prints at least two significant digits where one would do
    # (1.4E-45, not 1E-45): start there, as Debezium's JSON does.
    for digits in range(2, 10):
        short = float(f"{v:.{digits}g}")
        try:
            if struct.pack("<f", short) == want:
                return short
        except OverflowError:  # rounded up past the largest binary32
            continue
    return v


_NUMERIC = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


def default_value(col: ColumnSchema, convert: Convert) -> Any:
    """A column's DEFAULT as Debezium puts it in the field's schema (``default``), rendered
    like a value; None when there is none, it is NULL, or it is an expression Debezium leaves
    out (``(1 + 1)``). ``current_timestamp()`` is the epoch, as Debezium's parser makes it."""
    text = col.default
    if text is None or text.upper() == "NULL":
        return None
    value: Value
    try:
        if col.type in _TEMPORAL:
            return _temporal_default(col, convert, _unquoted(text))
        if col.type in _TEXT and len(text) >= 2 and text[0] == text[-1] == "'":
            body = text[1:-1].replace("''", "'")
            value = frozenset(body.split(",")) - {""} if col.type == "set" else body
        elif col.type in _NUMERIC:
            value = int(text)
        elif col.type == "decimal":
            value = Decimal(text)
        elif col.type in ("float", "double"):
            value = float(text)
        elif col.type == "bit" and text[:2].lower() == "b'" and text[-1] == "'":
            value = int(text[2:-1] or "0", 2)
        else:
            return None
    except ValueError:
        return None
    return convert(value)


_TEMPORAL = ("date", "datetime", "timestamp", "time")
_EPOCH = "1970-01-01 00:00:00"
_ZERO = re.compile(r"(\d{4}-\d{2}-00|\d{4}-00-\d{2}|0000-\d{2}-\d{2})( 00:00:00(\.\d{1,6})?)?|0")
_TIME = re.compile(r"(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?")


def _unquoted(text: str) -> str:
    """A DEFAULT's text without its quotes; CURRENT_TIMESTAMP (any precision) as the epoch,
    which is what Debezium's DDL parser puts in its place."""
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    if text.lower().startswith(("current_timestamp", "now(")):
        return _EPOCH
    return text


def _temporal_default(col: ColumnSchema, convert: Convert, text: str) -> Any:
    """A DATE, DATETIME, TIMESTAMP or TIME default as Debezium renders it: a zero date is no
    default for a nullable column and the epoch for a NOT NULL one; so is a TIMESTAMP's
    epoch (what CURRENT_TIMESTAMP becomes)."""
    if col.type == "time":
        m = _TIME.fullmatch(text)
        if m is None:
            return None
        sign, h, mi, sec, frac = m.groups()
        us = ((int(h) * 60 + int(mi)) * 60 + int(sec)) * 1_000_000 + int((frac or "").ljust(6, "0"))
        return -us if sign else us
    zero = _ZERO.fullmatch(text) is not None
    if col.type == "timestamp" and (zero or text == _EPOCH):
        return None if col.nullable else "1970-01-01T00:00:00Z"
    if zero:
        return None if col.nullable else 0
    moment = dt.datetime.fromisoformat(text)
    return convert(moment.date() if col.type == "date" else moment)


def _string(v: Value) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v
