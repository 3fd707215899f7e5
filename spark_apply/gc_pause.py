"""CPython's cyclic garbage collector, paused for the length of a batch."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with CPython's cyclic garbage collector off, then collect the young
    generations once.

    A batch allocates ~20 objects per row (decoded images, envelopes, order keys, collapsed
    entries) that live until the batch ends and are freed by reference counting; with the
    collector on, every 700 allocations trigger a pass over the young objects and every few
    of those a pass over everything older, so the same live objects are traversed again and
    again: measured, decoding 50k W1 rows ran at half speed (`python -m benchmarks.apply
    --only path`). Cycles a batch makes are found by the one collection at its end.

    Shared by threads and nestable: a batch's write (on the writer thread) overlaps the next
    batch's read, and the collector comes back when the last block ends, as it was before the
    first began."""
    with _pause.lock:
        if _pause.holders == 0:
            _pause.owned = gc.isenabled()
            gc.disable()
        _pause.holders += 1
    try:
        yield
    finally:
        with _pause.lock:
            _pause.holders -= 1
            last = _pause.holders == 0 and _pause.owned
            if last:
                gc.enable()
        if last:
            gc.collect(1)


class _Pause:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        """Blocks now running with the collector paused."""
        self.owned = False
        """Whether the first of them found the collector on (so the last turns it back on)."""


_pause = _Pause()
