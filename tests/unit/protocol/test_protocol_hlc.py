"""The hybrid logical clock never goes back and carries logical overflow."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rowbus.protocol.hlc import HybridClock, compose, logical, physical_ms


def test_compose_and_split() -> None:
    ts = compose(1_700_000_000_123, 7)
    assert ts == (1_700_000_000_123 << 16) | 7
    assert physical_ms(ts) == 1_700_000_000_123
    assert logical(ts) == 7
    with pytest.raises(ValueError, match="logical"):
        compose(1, 0x10000)
    with pytest.raises(ValueError, match="before the epoch"):
        compose(-1)


def test_physical_time_ahead_resets_the_logical_part() -> None:
    c = HybridClock()
    assert c.next(1000) == compose(1000, 0)
    assert c.next(1000) == compose(1000, 1)
    assert c.next(999) == compose(1000, 2)  # the binlog time went back: count on
    assert c.next(1001) == compose(1001, 0)


def test_logical_overflow_carries_into_the_physical_part() -> None:
    c = HybridClock(last=compose(1000, 0xFFFF))
    assert c.next(1000) == compose(1001, 0)
    assert c.next(1000) == compose(1001, 1)


def test_state_is_the_last_ts() -> None:
    c = HybridClock()
    for ms in (5, 5, 4, 9):
        c.next(ms)
    restored = HybridClock(last=c.last)
    assert restored.next(1) == c.next(1)
    assert "HybridClock(last=" in repr(c)
    with pytest.raises(ValueError, match="outside"):
        HybridClock(last=-1)


def test_the_clock_refuses_to_pass_63_bits() -> None:
    c = HybridClock(last=2**63 - 1)
    with pytest.raises(OverflowError):
        c.next(0)


@given(st.lists(st.integers(0, 2**40), max_size=200), st.integers(0, 2**50))
def test_strictly_increasing_whatever_the_physical_times(times: list[int], start: int) -> None:
    c = HybridClock(last=start)
    last = start
    for ms in times:
        ts = c.next(ms)
        assert ts > last
        assert physical_ms(ts) >= ms
        last = ts
