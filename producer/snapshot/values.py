"""A SELECT's column values to protocol values, equal to what the binlog path decodes for the
same stored value (`rowbus.producer.values`, PROTOCOL.md §2).

The snapshot connection is opened with `CONVERSIONS`: temporal columns arrive as the text the
server prints (zero dates included, which pymysql would turn into None or a string), so they are
parsed here by the column's type; the session's time zone is UTC, so a TIMESTAMP's text is a UTC
instant. FLOAT is selected as ``CAST(col AS DOUBLE)``: the exact stored float32, which the text
form (6 significant digits) loses; UUID, INET6 and INET4 as the bytes the binlog carries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions

from rowbus.protocol.events import ColumnSchema
from rowbus.protocol.values import Value, ZeroDate, parse_time

CONVERSIONS: dict[Any, Any] = {
    k: v
    for k, v in conversions.items()
    if k
    not in (
        FIELD_TYPE.DATE,
        FIELD_TYPE.NEWDATE,
        FIELD_TYPE.DATETIME,
        FIELD_TYPE.TIMESTAMP,
        FIELD_TYPE.TIME,
    )
}
"""pymysql's conversions without the temporal ones (those stay text)."""

Convert = Callable[[Any], Value]


def select_expression(column: ColumnSchema) -> str:
    """The column as the snapshot SELECT reads it."""
    quoted = "`" + column.name.replace("`", "``") + "`"
    if column.type == "float":
        return f"CAST({quoted} AS DOUBLE)"
    # MariaDB's UUID, INET6 and INET4 print as text; the binlog holds their bytes (§2.1).
    if column.type == "uuid":
        return f"UNHEX(REPLACE(CAST({quoted} AS CHAR), '-', ''))"
    if column.type in ("inet6", "inet4"):
        return f"INET6_ATON({quoted})"
    return quoted


def _is_zero(date_part: str) -> bool:
    y, m, d = (int(p) for p in date_part.split("-"))
    if y == 0 or m == 0 or d == 0:
        return True
    try:
        dt.date(y, m, d)
    except ValueError:
        return True  # a day the month does not have (ALLOW_INVALID_DATES)
    return False


def _zero(s: str) -> bool:
    """Year, month or day 0 (the cheap test; a day the month lacks fails to parse)."""
    return s.startswith("0000") or "-00" in s[:10]


def parse_date(text: Any) -> Value:
    """A DATE as the server prints it (`_resultset` parses the plain form natively)."""
    s = text.decode() if isinstance(text, bytes) else str(text)
    if _zero(s):
        return ZeroDate(s)
    try:
        return dt.date.fromisoformat(s)
    except ValueError:
        return ZeroDate(s) if _is_zero(s) else _reraise(s)


def parse_datetime(text: Any) -> Value:
    """A DATETIME as the server prints it (`_resultset` parses the plain form natively)."""
    s = text.decode() if isinstance(text, bytes) else str(text)
    if _zero(s):
        return ZeroDate(s)
    try:
        return dt.datetime.fromisoformat(s)
    except ValueError:
        return ZeroDate(s) if _is_zero(s[:10]) else _reraise(s)


def parse_timestamp(text: Any) -> Value:
    """A TIMESTAMP as the server prints it, in UTC (`_resultset` parses the plain form natively)."""
    s = text.decode() if isinstance(text, bytes) else str(text)
    if _zero(s):
        return ZeroDate(s)
    try:
        return dt.datetime.fromisoformat(s).replace(tzinfo=dt.UTC)
    except ValueError:
        return ZeroDate(s) if _is_zero(s[:10]) else _reraise(s)


def _reraise(s: str) -> Value:
    raise ValueError(f"not a temporal value the server prints: {s!r}")


def _time(text: Any) -> Value:
    s = text.decode() if isinstance(text, bytes) else str(text)
    body, _, frac = s.partition(".")
    return parse_time(f"{body}.{frac.ljust(6, '0')}" if frac else body)


def _bit(raw: Any) -> Value:
    return int.from_bytes(raw, "big") if isinstance(raw, bytes) else int(raw)


def _set(text: Any) -> Value:
    s = text.decode() if isinstance(text, bytes) else str(text)
    return frozenset(s.split(",")) if s else frozenset()


def _text(raw: Any) -> Value:
    return raw.decode() if isinstance(raw, bytes) else raw


def _same(raw: Any) -> Value:
    return raw  # type: ignore[no-any-return]


_BY_TYPE: dict[str, Convert] = {
    "date": parse_date,
    "datetime": parse_datetime,
    "timestamp": parse_timestamp,
    "time": _time,
    "bit": _bit,
    "set": _set,
    "enum": _text,
    "json": _text,
}


def converter(column: ColumnSchema) -> Convert:
    """How a non-NULL value of `column` from the snapshot connection becomes a protocol value."""
    found = _BY_TYPE.get(column.type)
    if found is not None:
        return found
    if column.type == "year":
        return int
    # Integers, DECIMAL (pymysql: Decimal), DOUBLE and the CAST FLOAT (float), character
    # columns (str, decoded by the server's conversion to utf8mb4) and binary ones (bytes).
    return _same


def post_converters(columns: tuple[ColumnSchema, ...]) -> list[Convert | None]:
    """Per column its `converter`, None where the value stays as pymysql reads it."""
    return [None if f is _same else f for f in map(converter, columns)]


def row_converter(
    columns: tuple[ColumnSchema, ...],
) -> Callable[[tuple[Any, ...]], tuple[Value, ...]]:
    """A whole row's converter."""
    special = [(i, f) for i, f in enumerate(post_converters(columns)) if f is not None]
    if not special:
        return tuple
    # Only the columns that need it are touched (a W1 row: 2 of 10), NULL kept as is.

    def convert(row: tuple[Any, ...]) -> tuple[Value, ...]:
        out = list(row)
        for i, f in special:
            v = out[i]
            if v is not None:
                out[i] = f(v)
        return tuple(out)

    return convert
