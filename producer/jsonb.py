"""MySQL 8's binary JSON (a JSON column in a row event) to its text, as MySQL prints it.

The format (MySQL's ``json_binary.h``): a type byte, then the value. Objects and arrays come in
a small (16-bit offsets) and a large (32-bit) form: element count, byte size, for an object the
key entries (offset, 16-bit length), then one value entry per element (a type byte and either
an offset from the start of the container or, for small scalars, the value itself inline), then
the keys and values. Strings carry a variable-length length (7 bits a byte, low first).

The text form is the one MySQL prints: ``{"a": 1, "b": [true, null]}`` (", " and ": "), keys in
the stored order (MySQL sorts them by length, then bytes), strings JSON-escaped with non-ASCII
kept, integers exact, doubles as the shortest text that reads back (an integral double keeps a
``.0``), and opaque values (dates, times, decimals) as MySQL prints them.
"""

from __future__ import annotations

import base64
import json
import struct
from decimal import Decimal

_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY = 0, 1, 2, 3
_LITERAL, _INT16, _UINT16, _INT32, _UINT32, _INT64, _UINT64, _DOUBLE, _STRING = range(4, 13)
_OPAQUE = 15
_LITERALS = {0: "null", 1: "true", 2: "false"}
_MYSQL_DECIMAL, _MYSQL_DATE, _MYSQL_TIME, _MYSQL_DATETIME, _MYSQL_TIMESTAMP = 246, 10, 11, 12, 7
_MYSQL_DATETIME2, _MYSQL_TIME2, _MYSQL_TIMESTAMP2, _MYSQL_NEWDATE = 18, 19, 17, 14


class JsonFormatError(ValueError):
    """The bytes are not MySQL binary JSON."""


def json_text(data: bytes) -> str:
    """The text of the binary JSON document `data` (the column value's bytes)."""
    if not data:
        return "null"
    try:
        return _value(data[0], data, 1)
    except (IndexError, struct.error) as exc:
        raise JsonFormatError(f"truncated binary JSON ({exc})") from None


def _value(kind: int, data: bytes, at: int) -> str:
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY):
        return _container(kind, data, at)
    if kind == _LITERAL:
        return _LITERALS[data[at]]
    fmt = _SCALARS.get(kind)
    if fmt is not None:
        return str(struct.unpack_from(fmt, data, at)[0])
    if kind == _DOUBLE:
        return _double(struct.unpack_from("<d", data, at)[0])
    if kind == _STRING:
        length, at = _varlen(data, at)
        return _quote(data[at : at + length].decode("utf-8"))
    if kind == _OPAQUE:
        field_type = data[at]
        length, at = _varlen(data, at + 1)
        return _opaque(field_type, data[at : at + length])
    raise JsonFormatError(f"unknown binary JSON type {kind}")


_SCALARS = {
    _INT16: "<h",
    _UINT16: "<H",
    _INT32: "<i",
    _UINT32: "<I",
    _INT64: "<q",
    _UINT64: "<Q",
}


def _container(kind: int, data: bytes, start: int) -> str:
    keys, slots = _layout(kind, data, start)
    values = [_inline(k, data, at) if inline else _value(k, data, at) for k, at, inline in slots]
    if keys is None:
        return "[" + ", ".join(values) + "]"
    return "{" + ", ".join(f"{_quote(k)}: {v}" for k, v in zip(keys, values, strict=True)) + "}"


def _layout(
    kind: int, data: bytes, start: int
) -> tuple[list[str] | None, list[tuple[int, int, bool]]]:
    """An object's keys (None for an array) and each member's (type, where its value starts,
    inlined in its slot) — the header both printing (`_container`) and `tree` read."""
    large = kind in (_LARGE_OBJECT, _LARGE_ARRAY)
    word = "<I" if large else "<H"
    w = 4 if large else 2
    count = struct.unpack_from(word, data, start)[0]
    at = start + 2 * w
    keys: list[str] | None = None
    if kind in (_SMALL_OBJECT, _LARGE_OBJECT):
        keys = []
        for _ in range(count):
            offset = struct.unpack_from(word, data, at)[0]
            length = struct.unpack_from("<H", data, at + w)[0]
            keys.append(data[start + offset : start + offset + length].decode("utf-8"))
            at += w + 2
    slots: list[tuple[int, int, bool]] = []
    for _ in range(count):
        vkind = data[at]
        if _inlined(vkind, large):
            slots.append((vkind, at + 1, True))
        else:
            slots.append((vkind, start + struct.unpack_from(word, data, at + 1)[0], False))
        at += 1 + w
    return keys, slots


def _inlined(kind: int, large: bool) -> bool:
    return kind in (_LITERAL, _INT16, _UINT16) or (large and kind in (_INT32, _UINT32))


def _inline(kind: int, data: bytes, at: int) -> str:
    if kind == _LITERAL:
        return _LITERALS[data[at]]
    return str(struct.unpack_from(_SCALARS[kind], data, at)[0])


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    length = shift = 0
    for _ in range(5):
        byte = data[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, at
        shift += 7
    raise JsonFormatError("binary JSON length longer than 5 bytes")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _double(value: float) -> str:
    text = repr(value)
    if "e" in text:
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return text


def _opaque(field_type: int, raw: bytes) -> str:
    if field_type == _MYSQL_DECIMAL and len(raw) >= 2:
        return str(_decimal(raw[0], raw[1], raw[2:]))
    if field_type in (_MYSQL_DATE, _MYSQL_NEWDATE, _MYSQL_DATETIME, _MYSQL_DATETIME2) or (
        field_type in (_MYSQL_TIMESTAMP, _MYSQL_TIMESTAMP2)
    ):
        packed = struct.unpack_from("<q", raw)[0]
        return _quote(_packed_datetime(packed, date_only=field_type in (10, 14)))
    if field_type in (_MYSQL_TIME, _MYSQL_TIME2):
        return _quote(_packed_time(struct.unpack_from("<q", raw)[0]))
    # MySQL prints any other opaque value as "base64:typeNN:<base64 of the bytes>".
    return _quote(f"base64:type{field_type}:{base64.b64encode(raw).decode('ascii')}")


def _packed_datetime(packed: int, date_only: bool) -> str:
    whole, us = packed >> 24, packed & 0xFFFFFF
    ymd, hms = whole >> 17, whole & 0x1FFFF
    y, m = divmod(ymd >> 5, 13)
    d = ymd & 31
    if date_only:
        return f"{y:04d}-{m:02d}-{d:02d}"
    hh, mi, ss = hms >> 12, (hms >> 6) & 63, hms & 63
    return f"{y:04d}-{m:02d}-{d:02d} {hh:02d}:{mi:02d}:{ss:02d}.{us:06d}"


def _packed_time(packed: int) -> str:
    sign = "-" if packed < 0 else ""
    a = -packed if packed < 0 else packed
    whole, us = a >> 24, a & 0xFFFFFF
    hh, mi, ss = (whole >> 12) & 0x3FF, (whole >> 6) & 63, whole & 63
    return f"{sign}{hh:02d}:{mi:02d}:{ss:02d}.{us:06d}"


_DIG_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal(precision: int, scale: int, raw: bytes) -> Decimal:
    """MySQL's binary DECIMAL (decimal2bin): 9 digits per 4 bytes, big-endian, the leftover
    digits in fewer bytes, the sign in the top bit (flipped) and negatives inverted."""
    integral = precision - scale
    buf = bytearray(raw)
    negative = not buf[0] & 0x80
    buf[0] ^= 0x80
    if negative:
        buf = bytearray(b ^ 0xFF for b in buf)
    at = 0
    digits = ""

    def take(n: int, width: int) -> str:
        nonlocal at
        value = int.from_bytes(buf[at : at + n], "big")
        at += n
        return f"{value:0{width}d}"

    lead = integral % 9
    if lead:
        digits += take(_DIG_BYTES[lead], lead)
    for _ in range(integral // 9):
        digits += take(4, 9)
    frac = ""
    for _ in range(scale // 9):
        frac += take(4, 9)
    if scale % 9:
        frac += take(_DIG_BYTES[scale % 9], scale % 9)
    text = (digits.lstrip("0") or "0") + ("." + frac if frac else "")
    return Decimal(("-" if negative else "") + text)


class Leaf(str):
    """A scalar of a `tree`: its text as MySQL prints it (kept, never re-rendered)."""

    __slots__ = ()


Node = dict[str, "Node"] | list["Node"] | Leaf
"""A binary JSON document as a tree (`tree`): objects, arrays and printed scalars."""


def tree(data: bytes, along: frozenset[tuple[object, ...]] | None = None) -> Node:
    """The document `data` as a tree that `render` prints as `json_text` prints `data`;
    partial JSON updates are applied to it (`rowbus.producer.jsondiff`).

    With `along` (paths: sequences of member names, any other leg standing for every array
    cell), only the containers on those paths are made nodes; every other value stays a
    `Leaf` of its printed text, which `render` prints as it is (stored keys are already in
    MySQL's order), so a diff deep in a large document costs a print, not a tree."""
    if not data:
        return Leaf("null")
    try:
        return _node(data[0], data, 1, along)
    except (IndexError, struct.error) as exc:
        raise JsonFormatError(f"truncated binary JSON ({exc})") from None


def _node(kind: int, data: bytes, at: int, along: frozenset[tuple[object, ...]] | None) -> Node:
    if kind not in (_SMALL_OBJECT, _LARGE_OBJECT, _SMALL_ARRAY, _LARGE_ARRAY) or (
        along is not None and not any(along)
    ):
        return Leaf(_value(kind, data, at))
    keys, slots = _layout(kind, data, at)
    cells = None
    if along is not None and keys is None:
        cells = frozenset(path[1:] for path in along if path and not isinstance(path[0], str))
    values: list[Node] = []
    for n, (vkind, start, inline) in enumerate(slots):
        if inline:
            values.append(Leaf(_inline(vkind, data, start)))
            continue
        below = cells
        if along is not None and keys is not None:
            below = frozenset(path[1:] for path in along if path and path[0] == keys[n])
        values.append(_node(vkind, data, start, below))
    if keys is None:
        return values
    return dict(zip(keys, values, strict=True))


def key_order(key: str) -> tuple[int, bytes]:
    """MySQL's order of an object's keys: by byte length, then bytewise."""
    raw = key.encode("utf-8")
    return len(raw), raw


def render(node: Node) -> str:
    """A tree's text as `json_text` prints the document MySQL would store for it: an object's
    keys in MySQL's order (`key_order`), whatever order they were added in."""
    if isinstance(node, Leaf):
        return str(node)
    if isinstance(node, list):
        return "[" + ", ".join(render(v) for v in node) + "]"
    keys = sorted(node, key=key_order)
    return "{" + ", ".join(f"{_quote(k)}: {render(node[k])}" for k in keys) + "}"
