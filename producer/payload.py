"""MySQL's Transaction_payload events (``binlog_transaction_compression=ON``) unpacked into the
ordinary events they hold, one at a time.

With compression on, MySQL 8.0.20+ writes a transaction as its GTID event, then one
Transaction_payload event (type 40) whose body is a header of fields — each a packed integer
type, a packed integer length and the value: the payload size (1), the compression type (2; 0
zstd, 255 none), the uncompressed size (3), ended by 0 — and then the payload: the
transaction's other events (Query BEGIN, Table_map, Rows, Xid), each whole with its 19-byte
header and without a checksum, compressed as one zstd stream. A source sends the event to its
replicas as it is (libs/mysql/binlog/event/compression, control_events.h).

`unpack` yields those events as the dump stream would have carried them uncompressed: the OK
byte first, the end position (``log_pos``) the payload event's own — a resume point inside the
payload does not exist, and the transaction's end is the payload's end — and, when the stream
carries checksums, a CRC32 computed over the rebuilt event, so every decoding path
(`rowbus.producer.binlog`: framed, native, pure Python, transaction scan) reads them with the
code it reads uncompressed events with.

Memory stays bounded: the payload is decompressed as a stream and one inner event is held at a
time (an inner event is at most `LIMIT` bytes). A payload that does not decompress, an inner
event that runs past the payload or past `LIMIT`, a size that differs from the declared one or
a wrong checksum raise `compressed.Corrupt`, which the reader turns into one line at the
event's position.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

from rowbus.producer.compressed import Corrupt

TRANSACTION_PAYLOAD = 40
ZSTD, NONE = 0, 255
LIMIT = 1 << 30
"""The largest inner event accepted (1 GiB, MySQL's max_allowed_packet ceiling)."""
_END_MARK, _PAYLOAD_SIZE, _COMPRESSION, _UNCOMPRESSED_SIZE = 0, 1, 2, 3
_HEADER = 19
_READ = 1 << 16


def _packed(data: bytes, p: int, stop: int, end: int) -> tuple[int, int]:
    """A packed integer (net_field_length) at `p`: its value and the position after it."""
    if p >= stop:
        raise Corrupt(TRANSACTION_PAYLOAD, end, "its header ends early")
    first = data[p]
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first, 0)
    if first in (0xFB, 0xFF) or p + 1 + width > stop:  # NULL and error markers
        raise Corrupt(TRANSACTION_PAYLOAD, end, "a field of its header is malformed")
    if width == 0:
        return first, p + 1
    return int.from_bytes(data[p + 1 : p + 1 + width], "little"), p + 1 + width


def unpack(packet: bytes) -> Iterator[bytes]:
    """The events of a Transaction_payload dump packet (OK byte, header, body, and a CRC32
    when the stream carries checksums), each as a dump packet of its own."""
    end = int.from_bytes(packet[14:18], "little")
    size = int.from_bytes(packet[10:14], "little")
    stop = 1 + size
    if stop > len(packet):
        raise Corrupt(TRANSACTION_PAYLOAD, end, "the event is shorter than its size")
    fields: dict[int, int] = {}
    p = 1 + _HEADER
    for _ in range(16):
        kind, p = _packed(packet, p, stop, end)
        if kind == _END_MARK:
            break
        length, p = _packed(packet, p, stop, end)
        value, after = _packed(packet, p, stop, end)
        if after - p != length:
            raise Corrupt(TRANSACTION_PAYLOAD, end, f"header field {kind} has a wrong length")
        fields[kind], p = value, after
    else:
        raise Corrupt(TRANSACTION_PAYLOAD, end, "its header does not end")
    body = fields.get(_PAYLOAD_SIZE)
    if body is None:
        raise Corrupt(TRANSACTION_PAYLOAD, end, "its header has no payload size")
    tail = stop - p - body
    if tail not in (0, 4):
        raise Corrupt(TRANSACTION_PAYLOAD, end, "the payload size does not match the event")
    if tail and zlib.crc32(packet[1 : stop - 4]) != int.from_bytes(
        packet[stop - 4 : stop], "little"
    ):
        raise Corrupt(TRANSACTION_PAYLOAD, end, "its checksum is wrong")
    kind = fields.get(_COMPRESSION, NONE)
    if kind not in (ZSTD, NONE):
        raise Corrupt(TRANSACTION_PAYLOAD, end, f"compression type {kind} is not zstd")
    data = memoryview(packet)[p : p + body]
    declared = fields.get(_UNCOMPRESSED_SIZE, body if kind == NONE else None)
    yield from _events(_Stream(data, kind == ZSTD, end), declared, bool(tail), end)


class _Stream:
    """The payload's bytes, decompressed as they are read."""

    def __init__(self, data: memoryview, zstd: bool, end: int) -> None:
        self._end = end
        self._reader: Any = None
        self._plain = data
        self._at = 0
        if zstd:
            import zstandard

            self._reader = zstandard.ZstdDecompressor().stream_reader(data.tobytes())
        self.read_bytes = 0

    def read(self, n: int) -> bytes:
        """Exactly `n` bytes, or fewer only at the end of the payload."""
        if self._reader is None:
            out = bytes(self._plain[self._at : self._at + n])
            self._at += len(out)
        else:
            parts = []
            want = n
            for _ in range(n // _READ + 2):
                if want <= 0:
                    break
                try:
                    chunk = self._reader.read(min(want, _READ))
                except Exception as exc:  # noqa: BLE001 - zstandard's errors are one class per build
                    raise Corrupt(TRANSACTION_PAYLOAD, self._end, f"zstd: {exc}") from None
                if not chunk:
                    break
                parts.append(chunk)
                want -= len(chunk)
            out = b"".join(parts)
        self.read_bytes += len(out)
        return out


def _events(stream: _Stream, declared: int | None, checksum: bool, end: int) -> Iterator[bytes]:
    for _ in range(1 << 32):
        header = stream.read(_HEADER)
        if not header:
            break
        if len(header) < _HEADER:
            raise Corrupt(TRANSACTION_PAYLOAD, end, "an inner event's header is cut short")
        size = int.from_bytes(header[9:13], "little")
        if size < _HEADER or size > LIMIT:
            raise Corrupt(TRANSACTION_PAYLOAD, end, f"an inner event declares {size} bytes")
        body = stream.read(size - _HEADER)
        if len(body) < size - _HEADER:
            raise Corrupt(TRANSACTION_PAYLOAD, end, "an inner event runs past the payload")
        grown = size + (4 if checksum else 0)
        event = header[:9] + struct.pack("<II", grown, end) + header[17:] + body
        if checksum:
            event += struct.pack("<I", zlib.crc32(event))
        yield b"\x00" + event
    if declared is not None and stream.read_bytes != declared:
        raise Corrupt(
            TRANSACTION_PAYLOAD,
            end,
            f"it holds {stream.read_bytes} bytes, its header declares {declared}",
        )
