"""Transaction_payload events (MySQL 8.0.20+ with binlog_transaction_compression=ON): a
transaction's events after its GTID, each whole and without a checksum, compressed as one zstd
stream behind a header of fields (packed type, packed length, packed value: payload size,
compression type 0 = zstd, uncompressed size; 0 ends it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.mysql8 import events
from tests.mysql8.events import lenenc

ZSTD = 0


def _field(kind: int, value: int) -> bytes:
    packed = lenenc(value)
    return lenenc(kind) + lenenc(len(packed)) + packed


def compressing(level: int = 3, checksum: bool = True) -> Callable[[list[Any], int, int], bytes]:
    """A `Binlog.compression`: the builders of a transaction's events -> one payload event
    (with a CRC32 unless `checksum` is off, as binlog_checksum=NONE writes it)."""
    import zstandard

    def build(body: list[Any], first: int, when: int) -> bytes:
        # Inner events carry no position of their own: the payload's end stands for them all.
        inner = b"".join(_plain(b) for b in body)
        data = zstandard.ZstdCompressor(level=level).compress(inner)
        header = _field(1, len(data)) + _field(2, ZSTD) + _field(3, len(inner)) + lenenc(0)
        kind = events.TRANSACTION_PAYLOAD
        probe = events.event(kind, header + data, 0, when, checksum=checksum)
        return events.event(kind, header + data, first + len(probe), when, checksum=checksum)

    return build


def _plain(build: Any) -> bytes:
    """An event without its checksum, at position 0."""
    event: bytes = build(0)
    size = int.from_bytes(event[9:13], "little") - 4
    return event[:9] + size.to_bytes(4, "little") + event[13:-4]
