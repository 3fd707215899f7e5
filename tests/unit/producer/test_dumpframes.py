"""`rowbus.producer.dumpframes`: packets cut from buffered reads as the MySQL protocol frames
them (continuations over 16 MB, EOF and error packets, a stream cut inside a packet)."""

from __future__ import annotations

import io

import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.producer import dumpframes

MAX = 0xFFFFFF


def _frame(payload: bytes) -> bytes:
    """`payload` as the server sends it: packets of at most 2^24-1 bytes, a full one always
    followed by another (empty if need be)."""
    out = []
    seq = 0
    while True:
        part, payload = payload[:MAX], payload[MAX:]
        out.append(len(part).to_bytes(3, "little") + bytes([seq & 0xFF]) + part)
        seq += 1
        if len(part) < MAX:
            return b"".join(out)


def _reader(data: bytes, buffer: int = 64) -> io.BufferedReader:
    return io.BufferedReader(io.BytesIO(data), buffer_size=buffer)  # type: ignore[arg-type]


EOF_PACKET = b"\xfe\x00\x00\x02\x00"


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=0, max_size=300).map(lambda b: b"\x00" + b), max_size=30),
    buffer=st.integers(min_value=1, max_value=512),
    native=st.booleans(),
)
def test_events_come_out_as_they_went_in(payloads: list[bytes], buffer: int, native: bool) -> None:
    data = b"".join(_frame(p) for p in payloads) + _frame(EOF_PACKET)
    assert list(dumpframes.packets(_reader(data, buffer), native)) == payloads


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(
        st.binary(min_size=0, max_size=300).map(lambda b: b"\x00" + b)
        | st.sampled_from([b"", b"\x01skipped", b"\xfe" + b"n" * 12]),
        max_size=30,
    ),
    buffer=st.integers(min_value=1, max_value=4096),
)
def test_native_cutting_frames_as_the_loop_does(payloads: list[bytes], buffer: int) -> None:
    """Packets the native cut leaves to the loop (empty, not OK, a long 0xFE one) in between:
    both ways give the same events."""
    data = b"".join(_frame(p) for p in payloads) + _frame(EOF_PACKET)
    native = list(dumpframes.packets(_reader(data, buffer), True))
    assert native == list(dumpframes.packets(_reader(data, buffer), False))
    assert native == [p for p in payloads if p[:1] == b"\x00"]


@pytest.mark.parametrize("native", [True, False])
def test_an_event_over_16_mb_is_joined_from_its_packets(native: bool) -> None:
    for size in (MAX - 1, MAX, MAX + 5, 2 * MAX):
        big = b"\x00" + bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        small = b"\x00abc"
        data = _frame(big) + _frame(small) + _frame(EOF_PACKET)
        assert list(dumpframes.packets(_reader(data, 1 << 16), native)) == [big, small]


def test_an_error_packet_raises_pymysqls_error() -> None:
    error = b"\xff" + (1236).to_bytes(2, "little") + b"#HY000" + b"Could not find first log file"
    with pytest.raises(pymysql.err.OperationalError) as raised:
        list(dumpframes.packets(_reader(_frame(b"\x00ok") + _frame(error))))
    assert raised.value.args[0] == 1236


@pytest.mark.parametrize("cut", [2, 5, 9])
def test_a_stream_cut_short_raises_eof(cut: int) -> None:
    data = _frame(b"\x00" + b"e" * 20)
    with pytest.raises(EOFError):
        list(dumpframes.packets(_reader(data[:cut])))
