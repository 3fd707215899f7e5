"""CPython's cyclic garbage collector, paused for the length of a batch."""

from __future__ import annotations

import contextlib
import gc
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
    --only path`). Cycles a batch makes are found by the one collection at its end."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(1)
