"""Python JSON values in MySQL's binary JSON format (the JSON column's bytes in a row image).

A value is a type byte and its data: objects and arrays (small: 2-byte counts and offsets, large:
4-byte) hold an entry per key (offset, length) and per value (type, and the offset of its data
or, for literals and 16-bit integers, the value inline), offsets counted from the start of the
object's data; keys are sorted by length, then bytewise; strings carry a variable-length size
(7 bits per byte, low first). Numbers: int16/int32/int64, uint64 beyond, double.
"""

from __future__ import annotations

import struct
from typing import Any

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY, LITERAL = 0, 1, 2, 3, 4
INT16, UINT16, INT32, UINT32, INT64, UINT64, DOUBLE, STRING = 5, 6, 7, 8, 9, 10, 11, 12
NULL, TRUE, FALSE = 0, 1, 2


def encode(value: Any) -> bytes:
    kind, data = _value(value, large=False)
    return bytes([kind]) + data


def _varlen(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _value(value: Any, large: bool) -> tuple[int, bytes]:
    """(type, data) of a value written out of line."""
    if value is None:
        return LITERAL, bytes([NULL])
    if value is True:
        return LITERAL, bytes([TRUE])
    if value is False:
        return LITERAL, bytes([FALSE])
    if isinstance(value, int):
        if -(1 << 15) <= value < 1 << 15:
            return INT16, struct.pack("<h", value)
        if -(1 << 31) <= value < 1 << 31:
            return INT32, struct.pack("<i", value)
        if -(1 << 63) <= value < 1 << 63:
            return INT64, struct.pack("<q", value)
        return UINT64, struct.pack("<Q", value)
    if isinstance(value, float):
        return DOUBLE, struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode()
        return STRING, _varlen(len(raw)) + raw
    if isinstance(value, dict):
        return _container(value, large)
    if isinstance(value, list):
        return _container(value, large)
    raise TypeError(f"not JSON: {value!r}")


def _inline(kind: int, data: bytes, large: bool) -> bool:
    return kind == LITERAL or kind in (INT16, UINT16) or (large and kind in (INT32, UINT32))


def _container(value: dict[str, Any] | list[Any], large: bool) -> tuple[int, bytes]:
    is_object = isinstance(value, dict)
    if is_object:
        assert isinstance(value, dict)
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        items = [value[k] for k in keys]
    else:
        keys, items = [], list(value)
    width = 4 if large else 2
    count = len(items)
    key_entry = width + 2
    value_entry = 1 + width
    header = 2 * width + (key_entry * count if is_object else 0) + value_entry * count
    key_bytes = b"".join(k.encode() for k in keys)
    key_entries = b""
    offset = header
    for k in keys:
        raw = k.encode()
        key_entries += offset.to_bytes(width, "little") + struct.pack("<H", len(raw))
        offset += len(raw)
    value_entries = b""
    data = b""
    offset = header + len(key_bytes)
    for item in items:
        kind, body = _value(item, large)
        if _inline(kind, body, large):
            value_entries += bytes([kind]) + body.ljust(width, b"\x00")
        else:
            value_entries += bytes([kind]) + (offset + len(data)).to_bytes(width, "little")
            data += body
    size = header + len(key_bytes) + len(data)
    if not large and size >= 1 << 16:
        return _container(value, large=True)
    out = count.to_bytes(width, "little") + size.to_bytes(width, "little")
    out += key_entries + value_entries + key_bytes + data
    kind = (
        (LARGE_OBJECT if large else SMALL_OBJECT)
        if is_object
        else (LARGE_ARRAY if large else SMALL_ARRAY)
    )
    return kind, out
