"""The Python value domain: one Python type per wire kind, so a value round-trips without a schema.

=====================  ===============================  =========================================
Python type            MySQL/MariaDB types              note
=====================  ===============================  =========================================
``None``               NULL                             any nullable column
``int``                TINYINT..BIGINT (signed and      -2**63 .. 2**64-1; the wire picks a signed
                       unsigned), YEAR, BIT             or an unsigned slot by range
``float``              FLOAT, DOUBLE                    finite only (MySQL stores no NaN/inf)
``decimal.Decimal``    DECIMAL/NUMERIC                  exact, finite only
``str``                CHAR, VARCHAR, TEXT, ENUM, JSON  valid Unicode (utf8mb4), no lone surrogates
``bytes``              BINARY, VARBINARY, BLOB
``datetime.date``      DATE
``datetime.datetime``  DATETIME (naive: wall clock),    TIMESTAMP decodes with ``tzinfo=UTC``
                       TIMESTAMP (aware: a UTC instant)
``datetime.timedelta`` TIME                             -838:59:59.999999 .. 838:59:59.999999
``frozenset[str]``     SET
``ZeroDate``           DATE, DATETIME, TIMESTAMP        a date with a zero part ('0000-00-00',
                       holding a zero date              '2024-00-15 10:00:00'), as MySQL prints it
=====================  ===============================  =========================================

``bool`` is not a value (``TINYINT(1)`` is an ``int``); nor is any other type.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from typing import TypeAlias

from rowbus.protocol.errors import ProtocolError

_ZERO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}( \d{2}:\d{2}:\d{2}(\.\d{1,6})?)?")


@dataclass(frozen=True, slots=True)
class ZeroDate:
    """A DATE, DATETIME or TIMESTAMP holding one of MySQL's zero dates, which no calendar type
    can hold: ``0000-00-00``, ``0000-00-00 00:00:00.000``, or a date with a zero month or day
    (``2024-00-15``, allowed without ``NO_ZERO_IN_DATE``), a day the month does not have
    (``2024-02-31``, stored under ``ALLOW_INVALID_DATES``), or a date of year 0 (``0000-01-01``:
    MySQL has it, Python's calendar starts at year 1).

    `text` is the value exactly as the server prints it (the column's fraction digits
    included), so a consumer writes it back unchanged. It is never a valid calendar date: those
    are `datetime.date` / `datetime.datetime` values.
    """

    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not _ZERO_DATE.fullmatch(self.text):
            raise ProtocolError(f"malformed zero date {self.text!r}")
        y, m, d = (int(p) for p in self.text[:10].split("-"))
        if m > 12 or d > 31:
            raise ProtocolError(f"malformed zero date {self.text!r}")
        if len(self.text) > 10:
            hh, mm, ss = (int(p) for p in self.text[11:19].split(":"))
            if hh > 23 or mm > 59 or ss > 59:
                raise ProtocolError(f"malformed zero date {self.text!r}")
        if y and m and d:
            try:
                dt.date(y, m, d)
            except ValueError:
                return  # '2024-02-31', stored under ALLOW_INVALID_DATES
            raise ProtocolError(f"{self.text!r} is a calendar date, not a zero date")


Value: TypeAlias = (
    int
    | float
    | Decimal
    | str
    | bytes
    | dt.date
    | dt.datetime
    | dt.timedelta
    | frozenset[str]
    | ZeroDate
    | None
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
TIME_MAX = dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999)
TIME_MAX_US = TIME_MAX // dt.timedelta(microseconds=1)

EPOCH_DATE_ORDINAL = dt.date(1970, 1, 1).toordinal()
EPOCH_NAIVE = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ONE_US = dt.timedelta(microseconds=1)


class Kind(IntEnum):
    """The wire kind of a value: one byte per column in a row image (see PROTOCOL.md §4)."""

    NULL = 0
    INT = 1  # signed 64-bit, in ``ints``
    UINT = 2  # unsigned 64-bit above INT64_MAX, in ``uints``
    DOUBLE = 3  # in ``doubles``
    DECIMAL = 4  # decimal string, in ``strings``
    STRING = 5  # in ``strings``
    BYTES = 6  # in ``blobs``
    DATE = 7  # days since 1970-01-01, in ``ints``
    DATETIME = 8  # microseconds since 1970-01-01T00:00:00 (wall clock), in ``ints``
    TIMESTAMP = 9  # microseconds since the Unix epoch (UTC), in ``ints``
    TIME = 10  # signed microseconds, in ``ints``
    SET = 11  # member count in ``ints``, then that many members in ``strings``
    ZERO_DATE = 12  # a zero date's text, in ``strings`` (protocol 1.1)


def kind_of(value: object) -> Kind:
    """The wire kind of `value`, or ProtocolError if it is not in the value domain."""
    match value:
        case None:
            return Kind.NULL
        case bool():
            raise ProtocolError("bool is not a rowbus value (TINYINT(1) is an int)")
        case int():
            if INT64_MIN <= value <= INT64_MAX:
                return Kind.INT
            if 0 <= value <= UINT64_MAX:
                return Kind.UINT
            raise ProtocolError(f"integer {value} does not fit in 64 bits")
        case float():
            if not math.isfinite(value):
                raise ProtocolError(f"float {value!r} is not finite")
            return Kind.DOUBLE
        case Decimal():
            if not value.is_finite():
                raise ProtocolError(f"decimal {value!r} is not finite")
            return Kind.DECIMAL
        case str():
            return Kind.STRING
        case bytes():
            return Kind.BYTES
        case dt.datetime():
            return Kind.DATETIME if value.tzinfo is None else Kind.TIMESTAMP
        case dt.date():
            return Kind.DATE
        case dt.timedelta():
            if not -TIME_MAX <= value <= TIME_MAX:
                raise ProtocolError(f"TIME {value} is outside ±838:59:59.999999")
            return Kind.TIME
        case ZeroDate():
            return Kind.ZERO_DATE
        case frozenset():
            if not all(isinstance(m, str) for m in value):
                raise ProtocolError("a SET value holds only str members")
            return Kind.SET
        case _:
            raise ProtocolError(f"{type(value).__name__} is not a rowbus value")


def check_value(value: object) -> Value:
    """Return `value` unchanged if it is in the value domain; raise ProtocolError otherwise."""
    kind_of(value)
    return value  # type: ignore[return-value]


def format_time(value: dt.timedelta) -> str:
    """A TIME as MySQL prints it: ``[-]H:MM:SS[.ffffff]`` (hours may exceed 24)."""
    us = value // ONE_US
    sign = "-" if us < 0 else ""
    us = abs(us)
    secs, frac = divmod(us, 1_000_000)
    mins, sec = divmod(secs, 60)
    hours, minute = divmod(mins, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{sec:02d}"
    return f"{text}.{frac:06d}" if frac else text


def parse_time(text: str) -> dt.timedelta:
    """Inverse of `format_time`; raises ProtocolError on a malformed or out-of-range TIME."""
    body = text[1:] if text.startswith("-") else text
    try:
        hms, _, frac = body.partition(".")
        hours, minute, sec = (int(p) for p in hms.split(":"))
        if not (0 <= minute < 60 and 0 <= sec < 60 and (frac == "" or len(frac) == 6)):
            raise ValueError(text)
        us = ((hours * 60 + minute) * 60 + sec) * 1_000_000 + (int(frac) if frac else 0)
    except ValueError as exc:
        raise ProtocolError(f"malformed TIME {text!r}") from exc
    if us > TIME_MAX_US or (frac and not frac.isdigit()):
        raise ProtocolError(f"TIME {text!r} is outside ±838:59:59.999999")
    return dt.timedelta(microseconds=-us if text.startswith("-") else us)
