"""The per-source hybrid logical clock that stamps every event's ``ts`` (PROTOCOL.md §3).

``ts = physical_ms << 16 | logical``: the high 48 bits are milliseconds since the Unix epoch,
the low 16 bits a counter. A clock's whole state is its last ts, so a reader restores it from
its checkpoint (``HybridClock(last=checkpoint.ts)``).
"""

from __future__ import annotations

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
TS_MAX = (1 << 63) - 1  # a ts fits a signed 64-bit long (Avro, Java)


def compose(physical_ms: int, logical: int = 0) -> int:
    """The ts of `physical_ms` and `logical` (0 <= logical <= 0xFFFF)."""
    if not 0 <= logical <= LOGICAL_MASK:
        raise ValueError(f"logical part {logical} is outside 0..{LOGICAL_MASK}")
    if physical_ms < 0:
        raise ValueError(f"physical time {physical_ms} ms is before the epoch")
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    """The physical part of `ts`, in milliseconds since the Unix epoch."""
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    """The logical counter of `ts`."""
    return ts & LOGICAL_MASK


class HybridClock:
    """A never-decreasing clock: each `next` is strictly greater than every earlier one.

    `next(physical_ms)` returns ``compose(physical_ms, 0)`` when that is ahead of the last ts,
    otherwise last + 1: the logical counter counts events within the same (or a past)
    millisecond, and when it passes 0xFFFF it carries into the physical part, so the clock
    runs a little ahead of the wall clock rather than going backwards.
    """

    __slots__ = ("_last",)

    def __init__(self, last: int = 0) -> None:
        if not 0 <= last <= TS_MAX:
            raise ValueError(f"ts {last} is outside 0..2**63-1")
        self._last = last

    @property
    def last(self) -> int:
        """The last ts handed out (the state to checkpoint)."""
        return self._last

    def next(self, physical_ms: int) -> int:
        """A ts for an event whose physical time is `physical_ms`; strictly increasing."""
        candidate = compose(physical_ms)
        ts = candidate if candidate > self._last else self._last + 1
        if ts > TS_MAX:
            raise OverflowError("hybrid clock passed 2**63-1")
        self._last = ts
        return ts

    def __repr__(self) -> str:
        return f"HybridClock(last={self._last})"
