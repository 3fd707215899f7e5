"""Specialised image split/join functions, generated once per row shape and cached.

A table's rows nearly always have the same shape (the Python types of their values, hence the
kind bytes), so `split` and `join` compile, per shape, one straight-line function that moves
every value in a single expression instead of looping and branching per value. Anything the
fast path does not cover, or any value it cannot vouch for (an int above 2**63-1, a NaN, ...),
falls back to the generic loops in `protocol.codec.image`, which also produce the errors.
The wire format is the same either way; this is only an implementation speed-up.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, cast

from protocol.codec.image import Columns, join_generic, split_generic
from protocol.errors import ProtocolError
from protocol.values import (
    EPOCH_DATE_ORDINAL,
    EPOCH_NAIVE,
    EPOCH_UTC,
    INT64_MAX,
    INT64_MIN,
    ONE_US,
    TIME_MAX_US,
    Kind,
    Value,
)

_CACHE_LIMIT = 4096
_Splitter = Callable[[Sequence[Value]], Columns]
_Joiner = Callable[..., tuple[Value, ...]]
_splitters: dict[tuple[type, ...], _Splitter | None] = {}
_joiners: dict[bytes, _Joiner | None] = {}


class _Fallback(Exception):  # noqa: N818 - control flow, never escapes this module
    """The fast path cannot vouch for a value; use the generic loop."""


def _decimal(text: str) -> Decimal:
    d = Decimal(text)
    if not d.is_finite():
        raise ValueError(f"decimal {text!r} is not finite")
    return d


def _time(us: int) -> dt.timedelta:
    if not -TIME_MAX_US <= us <= TIME_MAX_US:
        raise ValueError(f"TIME of {us} µs is outside ±838:59:59.999999")
    return dt.timedelta(microseconds=us)


_NS: dict[str, Any] = {
    "Columns": Columns,
    "_Fallback": _Fallback,
    "_MIN": INT64_MIN,
    "_MAX": INT64_MAX,
    "_TMAX": TIME_MAX_US,
    "_EN": EPOCH_NAIVE,
    "_EU": EPOCH_UTC,
    "_US": ONE_US,
    "_EDO": EPOCH_DATE_ORDINAL,
    "_td": dt.timedelta,
    "_fo": dt.date.fromordinal,
    "_dec": _decimal,
    "_time": _time,
}


def split(values: Sequence[Value]) -> Columns:
    """`image.split_generic`, fast for shapes seen before."""
    sig = tuple(map(type, values))
    try:
        fn = _splitters[sig]
    except KeyError:
        if len(_splitters) >= _CACHE_LIMIT:
            _splitters.clear()
        fn = _splitters[sig] = _make_splitter(sig)
    if fn is not None:
        try:
            return fn(values)
        except _Fallback:
            pass
    return split_generic(values)


def join(
    kinds: bytes,
    ints: Sequence[int],
    uints: Sequence[int],
    doubles: Sequence[float],
    strings: Sequence[str],
    blobs: Sequence[bytes],
) -> tuple[Value, ...]:
    """`image.join_generic`, fast for kind patterns seen before."""
    try:
        fn = _joiners[kinds]
    except KeyError:
        if len(_joiners) >= _CACHE_LIMIT:
            _joiners.clear()
        fn = _joiners[kinds] = _make_joiner(kinds)
    if fn is not None:
        try:
            return fn(ints, uints, doubles, strings, blobs)
        except _Fallback:
            pass
        except (ValueError, OverflowError) as exc:
            raise ProtocolError(f"row image: value out of range ({exc})") from None
    return join_generic(kinds, ints, uints, doubles, strings, blobs)


def _make_splitter(sig: tuple[type, ...]) -> _Splitter | None:
    checks: list[str] = []
    kinds: list[str] = []
    arrays: dict[str, list[str]] = {"i": [], "d": [], "s": [], "b": []}
    dynamic = False
    for n, t in enumerate(sig):
        v = f"v{n}"
        if t is type(None):
            kinds.append(str(Kind.NULL.value))
        elif t is int:
            checks.append(f"_MIN <= {v} <= _MAX")
            kinds.append(str(Kind.INT.value))
            arrays["i"].append(v)
        elif t is str:
            kinds.append(str(Kind.STRING.value))
            arrays["s"].append(v)
        elif t is float:
            checks.append(f"{v} - {v} == 0.0")
            kinds.append(str(Kind.DOUBLE.value))
            arrays["d"].append(v)
        elif t is Decimal:
            checks.append(f"{v}.is_finite()")
            kinds.append(str(Kind.DECIMAL.value))
            arrays["s"].append(f"str({v})")
        elif t is dt.datetime:
            dynamic = True
            kinds.append(f"(8 if {v}.tzinfo is None else 9)")
            arrays["i"].append(f"(({v} - (_EN if {v}.tzinfo is None else _EU)) // _US)")
        elif t is dt.date:
            kinds.append(str(Kind.DATE.value))
            arrays["i"].append(f"({v}.toordinal() - _EDO)")
        elif t is bytes:
            kinds.append(str(Kind.BYTES.value))
            arrays["b"].append(v)
        elif t is dt.timedelta:
            checks.append(f"-_TMAX <= {v} // _US <= _TMAX")
            kinds.append(str(Kind.TIME.value))
            arrays["i"].append(f"({v} // _US)")
        else:
            return None  # SET, and anything that is not a value: the generic loop decides
    names = ", ".join(f"v{n}" for n in range(len(sig))) + ","
    kinds_expr = f"bytes(({', '.join(kinds)},))" if dynamic else repr(bytes(int(k) for k in kinds))
    lines = [
        "def _split(values):",
        f"    {names} = values" if sig else "    pass",
    ]
    if checks:
        lines.append(f"    if not ({' and '.join(checks)}):")
        lines.append("        raise _Fallback")
    ints, doubles, strings, blobs = ("[" + ", ".join(arrays[a]) + "]" for a in "idsb")
    lines.append(f"    return Columns({kinds_expr}, {ints}, [], {doubles}, {strings}, {blobs})")
    return cast(_Splitter, _compile(lines, "_split"))


def _make_joiner(kinds: bytes) -> _Joiner | None:
    counts = {"I": 0, "U": 0, "D": 0, "S": 0, "B": 0}
    exprs: list[str] = []

    def take(a: str) -> str:
        expr = f"{a}[{counts[a]}]"
        counts[a] += 1
        return expr

    for k in kinds:
        if k == Kind.NULL:
            exprs.append("None")
        elif k == Kind.INT:
            exprs.append(take("I"))
        elif k == Kind.STRING:
            exprs.append(take("S"))
        elif k == Kind.DOUBLE:
            exprs.append(take("D"))
        elif k == Kind.DECIMAL:
            exprs.append(f"_dec({take('S')})")
        elif k == Kind.BYTES:
            exprs.append(take("B"))
        elif k == Kind.DATE:
            exprs.append(f"_fo({take('I')} + _EDO)")
        elif k == Kind.DATETIME:
            exprs.append(f"_EN + _td(0, 0, {take('I')})")
        elif k == Kind.TIMESTAMP:
            exprs.append(f"_EU + _td(0, 0, {take('I')})")
        elif k == Kind.TIME:
            exprs.append(f"_time({take('I')})")
        else:
            return None  # UINT, SET and unknown kinds: the generic loop checks them
    lines = [
        "def _join(I, U, D, S, B):",
        f"    if len(I) != {counts['I']} or len(U) != {counts['U']} or len(D) != {counts['D']}"
        f" or len(S) != {counts['S']} or len(B) != {counts['B']}:",
        "        raise _Fallback",
        f"    return ({', '.join(exprs)}{',' if exprs else ''})",
    ]
    return cast(_Joiner, _compile(lines, "_join"))


def _compile(lines: list[str], name: str) -> Any:
    scope: dict[str, Any] = {}
    exec("\n".join(lines), dict(_NS), scope)  # noqa: S102 - source built above from constants
    return scope[name]
