"""The Subscriber's merger stays bounded with its default settings: a huge transaction costs
the spill folder, not memory (benchmarks/bounded.py measured 1 GB for 1M rows before)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

from rowbus.consumers.settings import SubscriberSettings
from rowbus.merge.merger import Merger
from rowbus.merge.spill import DataEvent, SpillStore
from rowbus.protocol.events import BinlogPosition, Op, Resolved
from rowbus.testing.events import row, table

BIG = table(columns=("id", "v", "pad"))
PAD = "p" * 200  # the rows of benchmarks/bounded.py: BIGINT, INT, VARCHAR of 200 bytes
MB = 1 << 20


def big_rows(n: int, ts: int = 10) -> Iterator[DataEvent]:
    for i in range(n):
        yield row(
            ts,
            Op.INSERT,
            after=(i, i, f"{i:08d}{PAD[8:]}"),  # a value of its own, as a decoded event has
            tbl=BIG,
            index=i,
            count=n,
            txn="0-1-9",
            position=BinlogPosition("bin.000001", 1000 + i // 50, "0-1-9"),
        )


def test_a_huge_transaction_is_held_in_bounded_memory_with_the_default_limit() -> None:
    n = 100_000
    limit = SubscriberSettings().memory_limit_events
    merger = Merger([("t", 0, "s1")], memory_limit=limit)
    tracemalloc.start()
    try:
        for offset, event in enumerate(big_rows(n)):
            merger.push("t", 0, offset, event)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert merger.buffered == n
    assert merger.in_memory <= limit
    # ~0.65 KB per event here (~1.1 KB decoded from the wire, as benchmarks/bounded.py rows
    # are): the default limit keeps the stash at a few tens of MB, not all 100k events
    assert peak < 50 * MB, f"the merger peaked at {peak / MB:.0f} MiB holding {n} events"
    merger.push("t", 0, n, Resolved(source="s1", ts=10))
    [txn] = merger.release()
    assert sum(1 for _ in txn.events) == n
    merger.close()


def test_a_spilled_run_is_written_in_pieces() -> None:
    events = list(big_rows(40_000))  # ~12 MB encoded
    spill = SpillStore()
    try:
        tracemalloc.start()
        try:
            chunk = spill.write(enumerate(events))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert chunk.size > 10 * MB
        assert peak < 4 * MB, f"writing {chunk.size / MB:.0f} MiB built {peak / MB:.0f} MiB"
        assert [e for _, e in spill.read(chunk)] == events
    finally:
        spill.close()
