"""The job's planner memory limit: a batch's own events are not spilled while it is planned
(`job._memory_limit`), only what it leaves held."""

from __future__ import annotations

from rowbus.protocol.events import Op, Resolved
from rowbus.spark_apply.job import STASH_MEMORY_EVENTS, _memory_limit
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.sink_spill import PieceSpill
from tests.unit.spark_apply.events import row, table

LANES = [(f"top{s}", p, f"s{s}") for s in range(2) for p in range(3)]


def single_row_batch(transactions: int) -> list[Envelope]:
    """Single-row transactions of two sources over three partitions each, each lane's
    watermark at the end (so nothing can be released before the last records)."""
    t = table("up", "t")
    offsets = dict.fromkeys(LANES, 0)
    out = []
    for n in range(transactions):
        s, p = n % 2, (n // 2) % 3
        lane = (f"top{s}", p, f"s{s}")
        ev = row(n + 1, Op.INSERT, after=(n, "v"), tbl=t, source=f"s{s}")
        out.append(Envelope(lane[0], p, offsets[lane], ev))
        offsets[lane] += 1
    for lane in LANES:
        out.append(
            Envelope(lane[0], lane[1], offsets[lane], Resolved(source=lane[2], ts=transactions + 1))
        )
    return out


def test_a_batch_above_the_limit_spills_only_what_it_holds() -> None:
    batch = single_row_batch(STASH_MEMORY_EVENTS + 300)
    spill = PieceSpill(7)
    try:
        p = plan(PlannerState(), batch, LANES, spill=spill, memory_limit=_memory_limit(len(batch)))
        assert p.row_count == STASH_MEMORY_EVENTS + 300
        assert spill.size == 0  # all released: nothing was written, nothing read back
    finally:
        spill.close()
    # The fixed limit wrote the overflow, one chunk per single-row transaction.
    spill = PieceSpill(7)
    try:
        p = plan(PlannerState(), batch, LANES, spill=spill, memory_limit=STASH_MEMORY_EVENTS)
        assert p.row_count == STASH_MEMORY_EVENTS + 300
        assert spill.size > 0
    finally:
        spill.close()


def test_the_limit_is_a_function_of_the_batch() -> None:
    assert _memory_limit(10) == STASH_MEMORY_EVENTS
    assert _memory_limit(50_000) == 50_000
