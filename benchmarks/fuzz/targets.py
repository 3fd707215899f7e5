"""The fuzz targets: one per native extension, its input's first byte choosing the entry point
(`formats`). A target returns normally on any answer the entry point may give and raises on a
finding: an exception the entry point must not raise (SystemError is a C-API misuse), or an
answer that breaks what the caller relies on (a differential check against the Python path
where there is one). Memory errors and undefined behaviour abort the process in the sanitized
build before any of this."""

from __future__ import annotations

import ctypes
import zlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from benchmarks.fuzz import formats
from rowbus.producer import fastrows
from rowbus.producer.snapshot import resultset as resultset_module
from rowbus.producer.snapshot import values as snapshot_values
from rowbus.protocol.codec import ENCODING_HEADER, KIND_HEADER, fastpath
from rowbus.protocol.errors import ProtocolError
from rowbus.spark_apply import rendered
from rowbus.spark_apply.literals import image_text

_rows: Any = fastrows._BUILT
_resultset: Any = getattr(resultset_module, "_resultset")  # noqa: B009 - private
_literals: Any = getattr(rendered, "_native")  # noqa: B009 - private


class FindingError(AssertionError):
    """An answer the callers could not rely on."""


# ---- rows --------------------------------------------------------------------------------------


def _decode(data: bytes) -> None:
    case = formats.read_decode(data)
    if case is None:
        return
    try:
        got = _rows.decode(
            case.body, 0, len(case.body), case.mode, len(case.plan), case.present1,
            case.present2, case.plan,
        )  # fmt: skip
    except TypeError:
        return  # a spec the plan check refuses (fastrows never builds one)
    if got is None:
        return
    for before, after in got:
        for image in (before, after):
            if image is not None and len(image) != len(case.plan):
                raise FindingError(f"an image of {len(image)} values for {len(case.plan)} columns")


def _split(data: bytes) -> None:
    buf, pos = formats.read_split(data)
    payloads, end = _rows.split_packets(buf, pos)
    at = pos
    for p in payloads:  # each payload is the packet at `at`, whole and an OK packet
        if buf[at : at + 3] != len(p).to_bytes(3, "little") or buf[at + 4 : at + 4 + len(p)] != p:
            raise FindingError(f"payload at {at} is not the packet there")
        if not p or p[0] != 0:
            raise FindingError("a payload that is not an OK packet")
        at += 4 + len(p)
    if at != end or not pos <= end <= len(buf):
        raise FindingError(f"position {end} after the payloads' end {at}")


_OP = (1, 2, 3, 4)


def _change(data: bytes) -> None:
    c = formats.Cursor(data, 1)
    images = []
    for _ in range(2):
        n = c.byte() % 10
        images.append(None if n == 0 else tuple(formats.read_value(c) for _ in range(n - 1)))
    before, after = images
    op = _OP[c.byte() % 4]
    head = ("src", 1_700_000_000_000, op, "db", "t", 7, ("id",), before, after)
    tail = ("txn", c.byte(), None if c.byte() % 2 else 3, "bin.000001", 4, None)
    try:
        value = _rows.row_change(*head, *tail, True)
    except (ValueError, TypeError, OverflowError):
        value = None  # fastrows.change_value's answer: the protocol's encoder then
    try:
        cols = [None if image is None else fastpath.split(image) for image in (before, after)]
        _rows.row_change(*head[:7], *cols, *tail)
    except (ProtocolError, ValueError, TypeError, OverflowError):
        pass
    try:
        record = _rows.row_record(
            "topic", [], b'["db","t",', c.byte() % 3, 1 + c.byte(), *head, *tail
        )
    except (ValueError, TypeError, OverflowError):
        return
    if (
        record is not None
        and value is not None
        and record[3] != value + b"\x7d" + zlib.crc32(value).to_bytes(4, "little")
    ):
        raise FindingError("row_record's value is not row_change's with its trailer")


def rows(data: bytes) -> None:
    if not data:
        return
    (_decode, _split, _change)[data[0] % 3](data)


# ---- resultset -------------------------------------------------------------------------------


def _ident(v: Any) -> Any:
    return v


_POSTS: tuple[Callable[[Any], Any] | None, ...] = (None, _ident)
_TEMPORAL = (snapshot_values.parse_date, snapshot_values.parse_datetime,
             snapshot_values.parse_timestamp)  # fmt: skip
_EXPECTED = (ValueError, ConnectionError, ArithmeticError, ProtocolError)
"""What a row that fails to read or convert raises (select() closes the connection then): the
reader's errors and the snapshot converters' (a malformed zero date is a ProtocolError)."""


def _columns(kinds: list[int]) -> tuple[tuple[int, Any, Any], ...]:
    cols = []
    post: Callable[[Any], Any] | None
    for k in kinds:
        kind = k % 13  # 12: an unknown kind, refused
        if 9 <= kind <= 11:
            post = _TEMPORAL[kind - 9]
        elif kind == 12:
            post = _ident  # past the converter check, to the unknown kind's own error
        else:
            post = _POSTS[(k >> 4) % 2]
        call = (bytes, str, Decimal)[kind - 6] if 6 <= kind <= 8 else None
        cols.append((kind, call, post))
    return tuple(cols)


def resultset(data: bytes) -> None:
    case = formats.read_resultset(data)
    if case is None:
        return
    kinds, seq, cut, buf = case
    columns = _columns(kinds)
    if buf[:1] == b"\xff" and len(buf) > 4:
        # A payload of 2^24-1 bytes continued by the rest: the 16 MB continuation path.
        head = bytes([0xFB]) * (0xFFFFFF)
        buf = formats.packet(seq, head) + buf[1:]
    whole: list[Any] = []
    try:
        once = _resultset.rows(buf, 0, seq, columns, whole)
    except _EXPECTED:
        return
    # The same bytes in two reads, as resultset._read gets them from the socket: the same rows
    # and the same end.
    cut %= len(buf) + 1
    parts: list[Any] = []
    try:
        pos, nseq, status, error = _resultset.rows(buf[:cut], 0, seq, columns, parts)
        if status == 0:
            pos, nseq, status, error = _resultset.rows(buf, pos, nseq, columns, parts)
    except _EXPECTED as exc:
        raise FindingError(f"reading in two parts raised {exc!r}; in one it did not") from exc
    # repr: a float or Decimal NaN is not equal to itself (and a signalling one raises).
    if (pos, nseq, status, error) != once or repr(parts) != repr(whole):
        raise FindingError(f"two reads gave {(pos, nseq, status)}, one read {once[:3]}")


# ---- literals --------------------------------------------------------------------------------

_HEADERS = [(ENCODING_HEADER, b"protobuf"), (KIND_HEADER, b"row")]


class _Message:
    def __init__(self, value: bytes, offset: int) -> None:
        self._value, self._offset = value, offset

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return _HEADERS


def _python_row(value: bytes) -> tuple[str, int, str | None] | None:
    try:
        event = rendered.read_row(value, _HEADERS, "t[0]@0")
    except ProtocolError:
        return None
    return event.source, event.ts, rendered.rendered_row(event)  # type: ignore[union-attr, arg-type]


def _row_text(data: bytes) -> None:
    value = data[1:]
    got = _literals.row_text(value)
    if got is not None:
        expected = _python_row(value)
        if expected is None or expected != got:
            raise FindingError(f"row_text gave {got!r}, Python decoding {expected!r}")
    cols: tuple[list[Any], ...] = tuple([] for _ in range(9))
    msgs = [_Message(value, 0), _Message(value, 1)]
    n = _literals.append_records(msgs, 0, 2, cols, "t", 0, rendered.classify)
    if n != (2 if got is not None else 0) or len(cols[8]) != n:
        raise FindingError(f"append_records took {n} of two copies; row_text gave {got!r}")


def _render(data: bytes) -> None:
    args = formats.read_render(data)
    if args is None:
        return
    text = _literals.render(*args)
    if text is None:
        return
    try:
        expected = image_text(fastpath.join(*args))
    except ProtocolError as exc:
        raise FindingError(f"render gave {text!r}; decoding the image raised {exc!r}") from exc
    if text != expected:
        raise FindingError(f"render gave {text!r}, Python {expected!r}")


def literals(data: bytes) -> None:
    if not data:
        return
    (_row_text, _render)[data[0] % 2](data)


def canary(data: bytes) -> None:
    """Not a target: proves a run reports what it must (tests/fuzz). b"ASAN...": a heap
    overflow, which only the sanitizer sees; b"RAISE...": an exception."""
    if data.startswith(b"ASAN"):
        small = ctypes.create_string_buffer(8)
        ctypes.memmove(small, b"x" * 64, 64)
    if data.startswith(b"RAISE"):
        raise FindingError("the canary's exception")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "rows": rows,
    "resultset": resultset,
    "literals": literals,
    "canary": canary,
}
