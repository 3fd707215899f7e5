"""MariaDB's compressed events (log_bin_compress=ON) read on every path as their plain form.

Each compressed event here is built as MariaDB builds it (sql/log_event.cc, read for the format):
the bytes of an ordinary Query or rows event, with its statement or its rows zlib-compressed
behind a header byte and a big-endian length. The stream of compressed events goes through the
same replayed dump connection as `test_event_types.py` (the library's packet reading, then
`dumpframes` on the framed path) and must give the events the uncompressed stream gives, at the
same end positions. A payload that does not inflate to what it declares stops every path with
one line at its position, and never inflates past the declared length. Before the change, each
compressed type stopped the reader (refused) instead.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rowbus.producer import compressed, fastrows
from rowbus.producer.assembler import BinlogEvent, Query, Rotate, Rows, Skipped
from rowbus.producer.exceptions import CorruptBinlogError
from tests.unit.producer.mysql8_events import LONG, TABLE_ID, lenenc
from tests.unit.producer.test_event_types import FILE, PATHS, _ReplayStream, _rotate

COLUMNS = [("id", LONG, b""), ("a", LONG, b""), ("b", LONG, b"")]
ROWS = [[i, i * 1000, -i] for i in range(1, 40)]
"""Enough rows that the rows part is worth compressing (MariaDB compresses from
log_bin_compress_min_len bytes on, 256 by default)."""
STATEMENT = "CREATE TABLE shop.t (id INT PRIMARY KEY, a INT, b INT) -- " + "x" * 80


def _event(kind: int, body: bytes, position: int, checksum: bool) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    data = struct.pack("<IBIIIH", 1_700_000_000, kind, 1, size, position, 0) + body
    return b"\x00" + data + (zlib.crc32(data).to_bytes(4, "little") if checksum else b"")


def _blob(data: bytes, declared: int | None = None, flag: int = 0x80) -> bytes:
    """MariaDB's compressed part: header byte, the length big-endian in as few bytes as it
    takes, the zlib stream."""
    n = len(data) if declared is None else declared
    width = max(1, (n.bit_length() + 7) // 8)
    return bytes([flag | width]) + n.to_bytes(width, "big") + zlib.compress(data)


def _query(statement: str, position: int, checksum: bool, zipped: bool) -> bytes:
    schema = b"shop"
    head = struct.pack("<IIBHH", 7, 0, len(schema), 0, 0) + schema + b"\x00"
    text = statement.encode()
    return _event(
        165 if zipped else 2, head + (_blob(text) if zipped else text), position, checksum
    )


def _table_map(position: int, checksum: bool) -> bytes:
    body = TABLE_ID.to_bytes(6, "little") + b"\x01\x00"
    body += b"\x04shop\x00\x01t\x00" + lenenc(len(COLUMNS)) + bytes(t for _, t, _ in COLUMNS)
    body += lenenc(0) + b"\x07"  # no type metadata for INTs; every column nullable
    names = b"".join(lenenc(len(c)) + c.encode() for c, _, _ in COLUMNS)
    for kind, value in ((1, b"\x00"), (4, names), (8, lenenc(0))):
        body += bytes([kind]) + lenenc(len(value)) + value
    return _event(19, body, position, checksum)


def _image(values: list[int]) -> bytes:
    return b"\x00" + b"".join(struct.pack("<i", v) for v in values)


def _rows(op: int, v2: bool, position: int, checksum: bool, zipped: bool) -> bytes:
    """A rows event (op 0 write, 1 update, 2 delete), v1 (MariaDB) or v2 (its extra-data
    block), compressed as types 166-171 or plain as 23-25 / 30-32."""
    plain = (30 if v2 else 23) + op
    kind = plain - (30 - 169 if v2 else 23 - 166) if zipped else plain
    head = TABLE_ID.to_bytes(6, "little") + b"\x01\x00" + (b"\x02\x00" if v2 else b"")
    head += lenenc(len(COLUMNS)) + b"\x07" * (2 if op == 1 else 1)
    rows = b"".join(_image(r) + (_image([r[0], r[1] + 1, r[2]]) if op == 1 else b"") for r in ROWS)
    return _event(kind, head + (_blob(rows) if zipped else rows), position, checksum)


def _first(checksum: bool) -> bytes:
    """The dump's first event, the rotate to the file (with its checksum on a CRC32 stream)."""
    rotate = _rotate()
    if not checksum:
        return rotate
    data = rotate[1:10] + (len(rotate) + 3).to_bytes(4, "little") + rotate[14:]
    return b"\x00" + data + zlib.crc32(data).to_bytes(4, "little")


def _stream(checksum: bool, zipped: bool) -> list[bytes]:
    out, pos = [_first(checksum)], 100
    for make in (
        lambda p: _query(STATEMENT, p, checksum, zipped),
        lambda p: _table_map(p, checksum),
        *(
            (lambda p, op=op, v2=v2: _rows(op, v2, p, checksum, zipped))
            for v2 in (False, True)
            for op in (0, 1, 2)
        ),
    ):
        pos += 1000
        out.append(make(pos))
    return out


class _Replay(_ReplayStream):
    """The replayed dump of a MariaDB with binlog_row_metadata=FULL (the library reads the
    table maps' column names) and, when `checksum`, binlog_checksum=CRC32."""

    def __init__(self, payloads: list[bytes], checksum: bool, **kwargs: Any) -> None:
        super().__init__(payloads, **kwargs)
        self._checksum = checksum

    def _open(self) -> Any:
        lib = super()._open()
        lib._BinLogStreamReader__optional_meta_data = True
        lib._BinLogStreamReader__use_checksum = self._checksum
        return lib


def _read(payloads: list[bytes], path: str, checksum: bool) -> Iterator[BinlogEvent]:
    # CI builds the native decoder (test_fastrows asserts it): its paths fail without it.
    assert path not in ("framed", "native") or fastrows.AVAILABLE, "the native decoder is not built"
    stream = _Replay(payloads, checksum, **PATHS[path])
    try:
        yield from stream.events()
    finally:
        stream.close()


def _seen(events: list[BinlogEvent]) -> list[tuple[Any, ...]]:
    """Each event as a comparable value: rows decoded, a query without its size."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        match e:
            case Rows():
                out.append(("rows", e.op, e.table.qualified, e.end, e.decode()))
            case Query():
                out.append(("query", e.statement, e.schema, e.end, e.timestamp, e.sql_mode))
            case Rotate() | Skipped():
                out.append((type(e).__name__, e))
            case _:
                raise AssertionError(e)
    return out


@pytest.mark.parametrize("checksum", [False, True], ids=["no-checksum", "crc32"])
@pytest.mark.parametrize("path", list(PATHS))
def test_compressed_events_give_the_events_of_their_uncompressed_form(
    path: str, checksum: bool
) -> None:
    before = fastrows.Counts.native
    plain = list(_read(_stream(checksum, zipped=False), path, checksum))
    native_plain = fastrows.Counts.native - before
    zipped_stream = _stream(checksum, zipped=True)
    before = fastrows.Counts.native
    zipped = list(_read(zipped_stream, path, checksum))
    assert fastrows.Counts.native - before == native_plain  # the native decoder read them too
    assert _seen(zipped) == _seen(plain)
    if path != "transaction-scan":
        assert sum(isinstance(e, Rows) for e in zipped) == 6
        assert all(len(e.decode()) == len(ROWS) for e in zipped if isinstance(e, Rows))
    # A query's size is the compressed event's, as in the binlog: its start is `end - size`.
    query = next(e for e in zipped if isinstance(e, Query))
    assert query.size == len(zipped_stream[1]) - 1 - 19 - (4 if checksum else 0)


def test_inflate_rebuilds_the_plain_event_byte_for_byte_with_its_checksum() -> None:
    for checksum in (False, True):
        pairs = zip(_stream(checksum, False), _stream(checksum, True), strict=True)
        inflated = [compressed.inflate(z, checksum) for _, z in pairs if z[5] in compressed.PLAIN]
        assert inflated == [p for p in _stream(checksum, False) if p[5] in (2, *range(23, 33))]
        assert len(inflated) == 7


def _swap_blob(event: bytes, blob: Callable[[bytes], bytes]) -> bytes:
    """A compressed rows event (no checksum) with its compressed part replaced."""
    start = 1 + 19 + 8 + 1 + 1  # header, v1 post-header, column count, one bitmap
    rows = zlib.decompress(event[start + 1 + (event[start] & 7) :])
    body = event[20:start] + blob(rows)
    return _event(event[5], body, int.from_bytes(event[14:18], "little"), checksum=False)


def _write_v1() -> bytes:
    return _rows(0, False, 5000, checksum=False, zipped=True)


CORRUPT = {
    "bomb": (
        # Declares 64 bytes, inflates to 64 MiB: never inflated past the 64.
        lambda: _swap_blob(_write_v1(), lambda _: _blob(b"\x00" * (64 << 20), declared=64)),
        "inflates to more than the 64 bytes it declares",
    ),
    "short": (
        lambda: _swap_blob(_write_v1(), lambda rows: _blob(rows, declared=len(rows) + 1)),
        "not the",
    ),
    "garbage": (
        lambda: _swap_blob(_write_v1(), lambda rows: _blob(rows)[:3] + b"\xff" * 40),
        "zlib data is corrupt",
    ),
    "not-zlib": (
        lambda: _swap_blob(_write_v1(), lambda rows: _blob(rows, flag=0x90)),
        "is not zlib's",
    ),
    "huge-length": (
        lambda: _swap_blob(_write_v1(), lambda rows: _blob(rows, declared=(1 << 30) + 1)),
        "1073741825 bytes uncompressed",
    ),
    "checksum": (
        lambda: (e := _rows(0, False, 5000, True, True))[:-1] + bytes([e[-1] ^ 1]),
        "CRC32 checksum does not match",
    ),
    "truncated": (
        lambda: _event(166, TABLE_ID.to_bytes(6, "little") + b"\x01\x00", 5000, False),
        "ends before its compressed part",
    ),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(CORRUPT))
def test_a_corrupt_compressed_event_stops_every_path_with_one_line_at_its_position(
    case: str, path: str
) -> None:
    make, why = CORRUPT[case]
    checksum = case == "checksum"
    payloads = [_first(checksum), _query(STATEMENT, 1100, checksum, zipped=True), make()]
    seen: list[BinlogEvent] = []
    with pytest.raises(CorruptBinlogError) as stopped:
        seen.extend(_read(payloads, path, checksum))
    text = str(stopped.value)
    assert "\n" not in text
    assert text.startswith(f"{FILE}:5000: Write_rows_compressed_v1 event (type 166)"), text
    assert why in text, text
    assert [type(e) for e in seen] == [Rotate, Query]  # up to it, nothing past it


def test_a_bomb_is_never_inflated_past_its_declared_length() -> None:
    bomb = CORRUPT["bomb"][0]()
    tracemalloc.start()
    try:
        with pytest.raises(compressed.Corrupt):
            compressed.inflate(bomb, checksum=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # 64 MiB if it were inflated whole
