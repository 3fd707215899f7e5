"""Specialised image split/join functions, generated once per row shape and cached.

A table's rows nearly always have the same shape (the Python types of their values, hence the
kind bytes), so `split` and `join` compile, per shape, one straight-line function that moves
every value in a single expression instead of looping and branching per value. Anything the
fast path does not cover, or any value it cannot vouch for (an int above 2**63-1, a NaN, ...),
falls back to the generic loops in `rowbus.protocol.codec.image`, which also produce the errors.
The wire format is the same either way; this is only an implementation speed-up.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, cast

from rowbus.protocol.codec.image import Columns, join_generic, split_generic
from rowbus.protocol.values import (
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
    "_D": Decimal,
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
        except (_Fallback, ValueError, ArithmeticError):
            pass  # the generic loop finds the value and says what is wrong with it
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
    checks: list[str] = []
    decimals: list[str] = []

    def take(a: str) -> str:
        name = f"{a.lower()}{counts[a]}"
        counts[a] += 1
        return name

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
            name = take("S")
            decimals.append(f"    {name} = _D({name})")
            exprs.append(name)
            checks.append(f"{name}.is_finite()")
        elif k == Kind.BYTES:
            exprs.append(take("B"))
        elif k == Kind.DATE:
            exprs.append(f"_fo({take('I')} + _EDO)")
        elif k == Kind.DATETIME:
            exprs.append(f"_EN + _td(0, 0, {take('I')})")
        elif k == Kind.TIMESTAMP:
            exprs.append(f"_EU + _td(0, 0, {take('I')})")
        elif k == Kind.TIME:
            name = take("I")
            exprs.append(f"_td(0, 0, {name})")
            checks.append(f"-_TMAX <= {name} <= _TMAX")
        else:
            return None  # UINT, SET and unknown kinds: the generic loop checks them
    lines = ["def _join(I, U, D, S, B):"]
    lens = " or ".join(f"len({a}) != {n}" for a, n in counts.items())
    lines += [f"    if {lens}:", "        raise _Fallback"]
    for a, n in counts.items():  # one unpacking per array beats indexing a protobuf container
        if n:
            lines.append(f"    {''.join(f'{a.lower()}{i}, ' for i in range(n))}= {a}")
    lines += decimals
    if checks:  # values that need a check; the generic loop raises the error
        lines += [f"    if not ({' and '.join(checks)}):", "        raise _Fallback"]
    lines.append(f"    return ({', '.join(exprs)}{',' if exprs else ''})")
    return cast(_Joiner, _compile(lines, "_join"))


def _compile(lines: list[str], name: str) -> Any:
    scope: dict[str, Any] = {}
    exec("\n".join(lines), dict(_NS), scope)  # noqa: S102 - source built above from constants
    return scope[name]
