"""`rowbus.producer.payload`: Transaction_payload events (MySQL's binlog transaction
compression) unpacked into their events, bounded in memory, and refused in one line when
corrupt. Event bytes from `tests.mysql8` (MySQL's documented formats)."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import pytest
import zstandard

from rowbus.producer.compressed import Corrupt
from rowbus.producer.payload import unpack
from tests.mysql8 import events
from tests.mysql8.events import lenenc
from tests.mysql8.payload import _field, compressing


def _inner() -> list[bytes]:
    return [
        events.query("BEGIN", "", 0, 1_700_000_000),
        events.xid(7, 0, 1_700_000_000),
    ]


def _packet(body: list[bytes], end: int = 5000) -> bytes:
    build = compressing()
    event = build([lambda e, b=b: events.with_end(b, e) for b in body], 1000, 0)
    return b"\x00" + events.with_end(event, end)


def test_the_events_come_out_whole_with_the_payloads_end_and_a_checksum() -> None:
    out = list(unpack(_packet(_inner(), end=5000)))
    assert [p[5] for p in out] == [events.QUERY, events.XID]
    for plain, packet in zip(_inner(), out, strict=True):
        assert int.from_bytes(packet[14:18], "little") == 5000
        assert len(packet) - 1 == int.from_bytes(packet[10:14], "little")
        assert zlib.crc32(packet[1:-4]) == int.from_bytes(packet[-4:], "little")
        assert packet[18:-4] == plain[17:-4]  # flags and body as the server wrote them


def _corrupt(packet: bytes, at: int, value: int) -> bytes:
    data = bytearray(packet)
    data[at] = value
    body = bytes(data[1:-4])
    return b"\x00" + body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda p: _corrupt(p, len(p) - 12, p[len(p) - 12] ^ 0xFF), "zstd"),
        (lambda p: p[:-4] + bytes(4), "checksum"),
        (lambda p: _corrupt(p, 1 + 19 + 2, 9), "does not match"),  # payload size field
    ],
)
def test_a_corrupt_payload_stops_with_one_line(change: object, why: str) -> None:
    packet = change(_packet(_inner()))  # type: ignore[operator]
    with pytest.raises(Corrupt) as caught:
        list(unpack(packet))
    assert caught.value.code == 40 and why in caught.value.why


def test_a_large_payload_is_unpacked_one_event_at_a_time() -> None:
    """128 MiB of rows events in one payload: Python holds a few events at a time."""
    event = events.event(events.WRITE_ROWS, bytes(64 * 1024 - 23), 0, checksum=False)
    count = 2048
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    data = b"".join(compressor.compress(event) for _ in range(count)) + compressor.flush()
    header = _field(1, len(data)) + _field(2, 0) + _field(3, len(event) * count) + lenenc(0)
    packet = b"\x00" + events.event(events.TRANSACTION_PAYLOAD, header + data, 999)
    tracemalloc.start()
    try:
        seen = sum(1 for _ in unpack(packet))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == count
    # A few copies of one event (the read, the rebuilt one) and the packet: not the 128 MiB.
    assert peak < 8 * len(event) + 2 * len(packet), peak
    assert peak * 100 < count * len(event)
