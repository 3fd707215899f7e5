"""Row images as columns of kinds: the compact form the protobuf and Avro encodings share.

An image of n values becomes ``kinds`` (n bytes, one `Kind` each) and five arrays — ``ints``,
``uints``, ``doubles``, ``strings``, ``blobs`` — holding, in column order, the values of the kinds
that live in them (PROTOCOL.md §4). Binary arrays are encoded by the protobuf/Avro runtime in C,
so a row costs a few Python operations per value rather than one message per value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.values import (
    EPOCH_DATE_ORDINAL,
    EPOCH_NAIVE,
    EPOCH_UTC,
    INT64_MAX,
    INT64_MIN,
    ONE_US,
    TIME_MAX_US,
    UINT64_MAX,
    Value,
    ZeroDate,
    kind_of,
)

_UTC = dt.UTC
_datetime = dt.datetime
_date = dt.date
_timedelta = dt.timedelta
_fromordinal = dt.date.fromordinal

# Kind bytes, as plain ints for speed.
_NULL, _INT, _UINT, _DOUBLE, _DECIMAL, _STRING = 0, 1, 2, 3, 4, 5
_BYTES, _DATE, _DATETIME, _TIMESTAMP, _TIME, _SET = 6, 7, 8, 9, 10, 11
_ZERO_DATE = 12
_LAST_KIND = _ZERO_DATE


class Columns(NamedTuple):
    """An image split by kind (see module docstring)."""

    kinds: bytes
    ints: list[int]
    uints: list[int]
    doubles: list[float]
    strings: list[str]
    blobs: list[bytes]


def split_generic(values: Sequence[Value]) -> Columns:  # noqa: PLR0915 - one flat loop
    """Split an image into kind bytes and per-kind arrays; ProtocolError on a bad value."""
    kinds = bytearray()
    ints: list[int] = []
    uints: list[int] = []
    doubles: list[float] = []
    strings: list[str] = []
    blobs: list[bytes] = []
    add_kind = kinds.append
    add_int = ints.append
    add_str = strings.append
    v: Any
    for v in values:
        t = type(v)
        if v is None:
            add_kind(_NULL)
        elif t is int:
            if INT64_MIN <= v <= INT64_MAX:
                add_kind(_INT)
                add_int(v)
            else:
                kind_of(v)  # raises if out of 64-bit range
                add_kind(_UINT)
                uints.append(v)
        elif t is str:
            add_kind(_STRING)
            add_str(v)
        elif t is float:
            if v - v != 0.0:  # NaN and infinities
                kind_of(v)
            add_kind(_DOUBLE)
            doubles.append(v)
        elif t is Decimal:
            if not v.is_finite():
                kind_of(v)
            add_kind(_DECIMAL)
            add_str(str(v))
        elif t is _datetime:
            if v.tzinfo is None:
                add_kind(_DATETIME)
                add_int((v - EPOCH_NAIVE) // ONE_US)
            else:
                add_kind(_TIMESTAMP)
                add_int((v - EPOCH_UTC) // ONE_US)
        elif t is _date:
            add_kind(_DATE)
            add_int(v.toordinal() - EPOCH_DATE_ORDINAL)
        elif t is bytes:
            add_kind(_BYTES)
            blobs.append(v)
        elif t is _timedelta:
            us = v // ONE_US
            if not -TIME_MAX_US <= us <= TIME_MAX_US:
                kind_of(v)
            add_kind(_TIME)
            add_int(us)
        elif t is frozenset:
            kind_of(v)  # checks members are str
            add_kind(_SET)
            members = sorted(v)
            add_int(len(members))
            strings.extend(members)
        elif t is ZeroDate:
            add_kind(_ZERO_DATE)
            add_str(v.text)
        else:
            kind_of(v)  # raises: bool, subclasses and foreign types are not values
            raise ProtocolError(f"{t.__name__} is not a rowbus value")  # pragma: no cover
    return Columns(bytes(kinds), ints, uints, doubles, strings, blobs)


def join_generic(
    kinds: bytes,
    ints: Iterable[int],
    uints: Iterable[int],
    doubles: Iterable[float],
    strings: Iterable[str],
    blobs: Iterable[bytes],
) -> tuple[Value, ...]:
    """Inverse of `split`; ProtocolError if the arrays do not match the kinds exactly."""
    ii, ui, di, si, bi = iter(ints), iter(uints), iter(doubles), iter(strings), iter(blobs)
    out: list[Value] = []
    add = out.append
    try:
        for k in kinds:
            if k == _INT:
                add(next(ii))
            elif k == _STRING:
                add(next(si))
            elif k == _NULL:
                add(None)
            elif k == _DOUBLE:
                add(next(di))
            elif k == _DECIMAL:
                add(_decimal(next(si)))
            elif k == _DATETIME:
                add(EPOCH_NAIVE + _timedelta(microseconds=next(ii)))
            elif k == _DATE:
                add(_fromordinal(next(ii) + EPOCH_DATE_ORDINAL))
            elif k == _TIMESTAMP:
                add(EPOCH_UTC + _timedelta(microseconds=next(ii)))
            elif k == _BYTES:
                add(next(bi))
            elif k == _TIME:
                us = next(ii)
                if not -TIME_MAX_US <= us <= TIME_MAX_US:
                    raise ProtocolError(f"TIME of {us} µs is outside ±838:59:59.999999")
                add(_timedelta(microseconds=us))
            elif k == _UINT:
                u = next(ui)
                if not INT64_MAX < u <= UINT64_MAX:
                    raise ProtocolError(f"unsigned slot holds {u}, which is not above 2**63-1")
                add(u)
            elif k == _SET:
                n = next(ii)
                if n < 0:
                    raise ProtocolError(f"SET with {n} members")
                add(frozenset([next(si) for _ in range(n)]))
            elif k == _ZERO_DATE:
                add(ZeroDate(next(si)))
            else:
                raise ProtocolError(f"unknown value kind {k}")
    except StopIteration:
        raise ProtocolError("row image: fewer values than its kinds say") from None
    except (OverflowError, ValueError) as exc:
        raise ProtocolError(f"row image: value out of range ({exc})") from None
    for rest in (ii, ui, di, si, bi):
        if next(rest, _END) is not _END:
            raise ProtocolError("row image: more values than its kinds say")
    return tuple(out)


_END = object()


def _decimal(text: str) -> Decimal:
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise ProtocolError(f"malformed decimal {text!r}") from None
    if not d.is_finite():
        raise ProtocolError(f"decimal {text!r} is not finite")
    return d
