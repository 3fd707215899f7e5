"""Protocol values as SQL literals, rendered once per value by type (the apply fast path).

pymysql's parameter path escapes every value through a generic encoder lookup and a regex-built
multi-row statement; for wide batches that cost more than the server spent on the rows. Here each
`rowbus.protocol.values.Value` type has one formatter, so a row is ``"(" + ",".join(…) + ")"`` and a
batch a handful of multi-row statements. The session must use backslash escapes (the sink sets
its own ``sql_mode`` without ``NO_BACKSLASH_ESCAPES``), UTF-8 (utf8mb4) and time zone UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from pymysql.converters import escape_string

from rowbus.protocol.values import Value, ZeroDate, format_time


def _str(v: str) -> str:
    return "'" + escape_string(v) + "'"


def _datetime(v: dt.datetime) -> str:
    if v.tzinfo is not None:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    return "'" + v.isoformat(" ") + "'"


def _date(v: dt.date) -> str:
    return "'" + v.isoformat() + "'"


def _decimal(v: Decimal) -> str:
    return format(v, "f")


def _bytes(v: bytes) -> str:
    return "X'" + v.hex() + "'" if v else "''"


def _set(v: frozenset[str]) -> str:
    return _str(",".join(sorted(v)))


def _time(v: dt.timedelta) -> str:
    # pymysql's escape_timedelta renders -0.25 s as '-1:59:59.750000' (days=-1 plus the rest).
    return "'" + format_time(v) + "'"


def _zero_date(v: ZeroDate) -> str:
    # The server's own text; the sink's sql_mode has no NO_ZERO_DATE / NO_ZERO_IN_DATE.
    return "'" + v.text + "'"


def _none(_: None) -> str:
    return "NULL"


class LitImage(tuple[str, ...]):
    """A row image whose items are SQL literals (`literal`), not values: `lit_image`,
    `as_literals`. The type marks the whole image, so nothing is wrapped per value; whatever
    takes values out of it (collapse's keys and rows) holds literal text from then on."""

    __slots__ = ()


SEP = "\x00"
"""Separates the literals of an image in `image_text`: no literal contains it (a NUL in a string
is escaped as ``\\0``, bytes are hex)."""


_FORMATTERS: dict[type, Callable[[Any], str]] = {
    int: int.__repr__,
    float: float.__repr__,
    str: _str,
    Decimal: _decimal,
    dt.datetime: _datetime,
    dt.date: _date,
    dt.timedelta: _time,
    ZeroDate: _zero_date,
    bytes: _bytes,
    frozenset: _set,
    type(None): _none,
}


def literal(value: Value) -> str:
    """`value` as a SQL literal; TypeError for a type that is not a protocol value."""
    try:
        return _FORMATTERS[type(value)](value)
    except KeyError:
        raise TypeError(f"{type(value).__name__} is not a protocol value") from None


def row_literal(values: Sequence[Value]) -> str:
    """``(v1,v2,…)``."""
    f = _FORMATTERS
    try:
        return "(" + ",".join([f[type(v)](v) for v in values]) + ")"
    except KeyError:
        bad = next(v for v in values if type(v) not in f)
        raise TypeError(f"{type(bad).__name__} is not a protocol value") from None


def image_text(values: Sequence[Value]) -> str:
    """The literals of `values` joined by `SEP` (what `lit_image` splits)."""
    if type(values) is LitImage:
        return SEP.join(values)
    f = _FORMATTERS
    try:
        return SEP.join([f[type(v)](v) for v in values])
    except KeyError:
        bad = next(v for v in values if type(v) not in f)
        raise TypeError(f"{type(bad).__name__} is not a protocol value") from None


def lit_image(text: str) -> LitImage:
    """An image rendered by `image_text` (of at least one value)."""
    return LitImage(text.split(SEP))


def as_literals(image: Sequence[Value]) -> LitImage:
    """`image` rendered (unchanged when it is one already)."""
    if type(image) is LitImage:
        return image
    f = _FORMATTERS
    try:
        return LitImage([f[type(v)](v) for v in image])
    except KeyError:
        bad = next(v for v in image if type(v) not in f)
        raise TypeError(f"{type(bad).__name__} is not a protocol value") from None


def is_null(literal_text: str) -> bool:
    """Whether a literal is SQL NULL (a string value renders quoted, never as ``NULL``)."""
    return literal_text == "NULL"


def row_of_literals(literals: Sequence[Any]) -> str:
    """``(l1,l2,…)`` of literals (what `row_literal` makes of values)."""
    return "(" + ",".join(literals) + ")"


def chunks(head: str, tail: str, items: Iterable[str], max_bytes: int) -> Iterator[str]:
    """``head + item,item,… + tail`` statements, each at most about `max_bytes` long."""
    part: list[str] = []
    size = 0
    for item in items:
        if part and size + len(item) > max_bytes:
            yield head + ",".join(part) + tail
            part, size = [], 0
        part.append(item)
        size += len(item) + 1
    if part:
        yield head + ",".join(part) + tail
