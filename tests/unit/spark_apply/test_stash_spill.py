"""The planner keeps held events in the spill store, not in its state: a huge fragmented
transaction held over many batches is released whole, the planner never holds more than its
memory limit, the state it leaves is an index whose size does not follow the events held, and
a replayed batch plans (and spills) exactly the same."""

from __future__ import annotations

import itertools
import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol import golden
from rowbus.protocol.events import Op
from rowbus.spark_apply.planner import Envelope, Plan, PlannerState, plan
from rowbus.spark_apply.sink_spill import PieceSpill
from rowbus.spark_apply.state_store import frames, unframe
from tests.unit.spark_apply.events import ddl, resolved, row, table

T = "topic"
EXPECTED = [(T, 0, "s1"), (T, 1, "s1")]
PIECE = 4096


class Pieces:
    """What the sink stores of each batch's segment: pieces keyed by (segment, start)."""

    def __init__(self) -> None:
        self.stored: dict[int, dict[int, bytes]] = {}

    def fetch(self, segment: int, pos: int) -> tuple[int, bytes] | None:
        starts = [s for s in self.stored.get(segment, {}) if s <= pos]
        if not starts:
            return None
        start = max(starts)
        return start, self.stored[segment][start]

    def keep(self, spill: PieceSpill, state: PlannerState) -> None:
        if spill.segment in state.segments():
            self.stored[spill.segment] = dict(spill.pieces(PIECE))


def big_transaction(rows: int, fragments: int) -> list[tuple[int, object]]:
    """One transaction of `rows` rows on partition 0 (count only on its last row, as a
    fragmented one), small transactions of another table on partition 1 between its
    fragments, and watermarks that hold them all until the end."""
    other = table("db", "u")
    items: list[tuple[int, object]] = []
    per = rows // fragments
    for f in range(fragments):
        for i in range(f * per, (f + 1) * per):
            last = i == rows - 1
            items.append(
                (
                    0,
                    row(
                        50,
                        Op.INSERT,
                        after=(i, "x" * 40),
                        index=i,
                        count=rows if last else None,
                        txn="big",
                    ),
                )
            )
        items.append((1, row(60 + f, Op.INSERT, after=(f, "y"), tbl=other, txn=f"small{f}")))
        items.append((0, resolved(49)))
        items.append((1, resolved(49)))
    items += [(0, resolved(10**9)), (1, resolved(10**9))]
    return items


def envs(items: list[tuple[int, object]]) -> list[Envelope]:
    next_offset: dict[int, int] = {}
    out = []
    for partition, event in items:
        off = next_offset.get(partition, 0)
        next_offset[partition] = off + 1
        out.append(Envelope(T, partition, off, event))  # type: ignore[arg-type]
    return out


def run_batches(
    order: list[Envelope], bounds: list[int], limit: int
) -> tuple[list[Envelope], list[Plan], Pieces]:
    """Plan batch by batch with a restart before each: the state is read back from its bytes
    and the spill store is new (older segments come from `Pieces`)."""
    store = Pieces()
    state, released, plans = PlannerState(), [], []
    for batch_id, (a, b) in enumerate(itertools.pairwise(bounds)):
        stored = state.to_bytes()
        (n,) = struct.unpack_from(">I", stored)
        # The header, written piece by piece, is the one JSON document it always was.
        assert (
            stored[4 : 4 + n]
            == json.dumps(json.loads(stored[4 : 4 + n]), separators=(",", ":")).encode()
        )
        state = PlannerState.from_bytes(stored)
        spill = PieceSpill(batch_id, store.fetch)
        p = plan(state, order[a:b], EXPECTED, spill=spill, memory_limit=limit)
        # A replay (same stored state, same records) plans and spills exactly the same.
        again = PieceSpill(batch_id, store.fetch)
        q = plan(state, order[a:b], EXPECTED, spill=again, memory_limit=limit)
        assert q == p
        assert list(again.pieces(PIECE)) == list(spill.pieces(PIECE))
        released += [e for s in p.steps for e in s.rows]  # read back before the spill goes
        store.keep(spill, p.state)
        spill.close()
        again.close()
        plans.append(p)
        state = p.state
    return released, plans, store


def test_a_huge_transaction_is_held_in_pieces_and_released_whole() -> None:
    rows, limit = 6000, 200
    order = envs(big_transaction(rows, 12))
    whole = plan(PlannerState(), order, EXPECTED)
    bounds = [*list(range(0, len(order), 450)), len(order)]
    released, plans, store = run_batches(order, bounds, limit)
    assert released == [e for s in whole.steps for e in s.rows]
    assert len([e for e in released if e.event.table == "t"]) == rows  # type: ignore[union-attr]
    held = [p.state.stash_events for p in plans]
    assert max(held) >= rows - 450  # the transaction really was held across batches
    assert held[-1] == 0
    for p in plans:
        assert p.state.stash == []  # no event in the state: only its index
        assert p.held_in_memory <= limit
        # The index does not follow the events held: a few chunks per batch.
        assert len(p.state.to_bytes()) < 16_000
    assert sum(len(x) for seg in store.stored.values() for x in seg.values()) > rows * 40


@settings(max_examples=25, deadline=None)
@given(
    st.integers(100, 1500),
    st.integers(1, 6),
    st.lists(st.integers(1, 200), max_size=8),
    st.integers(2, 120),
)
def test_any_split_and_limit_releases_the_same_sequence(
    rows: int, fragments: int, cuts: list[int], limit: int
) -> None:
    order = envs(big_transaction(rows, fragments))
    whole = plan(PlannerState(), order, EXPECTED)
    bounds = sorted({0, len(order), *[c * 10 for c in cuts if c * 10 < len(order)]})
    released, plans, _ = run_batches(order, bounds, limit)
    assert released == [e for s in whole.steps for e in s.rows]
    assert plans[-1].state.stash_events == 0
    assert all(p.held_in_memory <= limit for p in plans)


def test_a_spilled_transaction_split_by_a_shard_ddl_hold_is_rewritten_intact() -> None:
    """A big transaction on a waiting shard and another table, spilled in the batch's own
    segment, is split: each side is re-written to the segment while the old chunks are read
    from it (megabytes: several writes interleave with reads). The released side and, after
    a restart from the stored state, the held side come out whole and in order."""
    other = table("db", "u")
    altered = table("db", "t_a", columns=("id", "v", "w"))
    rows = 20_000
    items: list[tuple[int, object]] = [
        (0, ddl(40, "ALTER TABLE t_a ADD w INT", altered)),
        (1, ddl(40, "ALTER TABLE t_a ADD w INT", altered)),
    ]
    for i in range(rows):
        on_shard = i % 2 == 0
        items.append(
            (
                i % 2,
                row(
                    50,
                    Op.INSERT,
                    after=(i, "x" * 40, 1) if on_shard else (i, "y" * 40),
                    tbl=altered if on_shard else other,
                    index=i,
                    count=rows,
                    txn="big",
                ),
            )
        )
    items += [(0, resolved(60)), (1, resolved(60))]
    batch = envs(items)
    pieces = Pieces()
    spill = PieceSpill(1, pieces.fetch)
    p = plan(PlannerState(), batch, EXPECTED, lambda e: False, spill=spill, memory_limit=500)
    released = [e.event.after[0] for s in p.steps for e in s.rows]  # type: ignore[union-attr]
    assert released == list(range(1, rows, 2))
    pieces.keep(spill, p.state)
    spill.close()
    state = PlannerState.from_bytes(p.state.to_bytes())
    spill2 = PieceSpill(2, pieces.fetch)
    later = [Envelope(T, part, rows, resolved(70)) for part in (0, 1)]
    p2 = plan(state, later, EXPECTED, spill=spill2, memory_limit=500)
    assert p2.steps[0].ddl is not None
    held = [e.event.after for s in p2.steps for e in s.rows]  # type: ignore[union-attr]
    assert held == [(i, "x" * 40, 1) for i in range(0, rows, 2)]
    spill2.close()


def test_snapshot_markers_held_at_a_batch_end_are_read_back_in_a_later_batch() -> None:
    """A marker (1.5) the merger still holds when a batch ends is spilled like a row and read
    back from the sink's pieces (and from the stash frames of a state stored whole) in a later
    batch: both readers refused every kind but rows and DDLs, and the job stopped."""
    begin, ddl_, end = (golden.SAMPLES[n] for n in ("snapshot_begin", "ddl", "snapshot_end"))
    spill = PieceSpill(1)
    chunk = spill.write([(5, begin), (6, ddl_), (7, end)])  # type: ignore[list-item]
    pieces = Pieces()
    pieces.stored[1] = dict(spill.pieces(16))  # a marker cut across pieces
    later = PieceSpill(2, pieces.fetch)
    assert list(later.read(chunk)) == [(5, begin), (6, ddl_), (7, end)]
    assert later.fetched > 1
    stash = [Envelope(T, 0, 5, begin), Envelope(T, 1, 6, ddl_), Envelope(T, 2, 7, end)]
    assert unframe(b"".join(frames(stash))) == stash


def test_a_held_transaction_that_did_not_change_keeps_its_index_entry() -> None:
    """A lane stall: transactions of partition 0 held (partition 1 has no watermark yet) and
    spilled. A batch that brings them nothing leaves the very entries it was given, so the
    state given and the state left share one index (a long hold is not held twice on the
    driver); a transaction that did get events gets a new entry."""
    items: list[tuple[int, object]] = []
    for i in range(40):
        items.append((0, row(50 + i, Op.INSERT, after=(i, "x" * 40), txn=f"t{i}")))
    items.append((0, resolved(100)))
    pieces = Pieces()
    spill = PieceSpill(1, pieces.fetch)
    p = plan(PlannerState(), envs(items), EXPECTED, spill=spill, memory_limit=0)
    pieces.keep(spill, p.state)
    spill.close()
    assert sum(len(s.rows) for s in p.steps) == 0 and len(p.state.spilled) == 40
    before = p.state
    spill2 = PieceSpill(2, pieces.fetch)
    later = [Envelope(T, 0, 41, resolved(110))]
    q = plan(before, later, EXPECTED, spill=spill2, memory_limit=0)
    spill2.close()
    assert sum(len(s.rows) for s in q.steps) == 0
    assert [a is b for a, b in zip(q.state.spilled, before.spilled, strict=True)] == [True] * 40
    # Read back from its bytes (a restart): equal entries, and the next batch keeps those.
    stored = PlannerState.from_bytes(before.to_bytes())
    assert stored.spilled == before.spilled
    spill3 = PieceSpill(3, pieces.fetch)
    r = plan(stored, later, EXPECTED, spill=spill3, memory_limit=0)
    spill3.close()
    assert all(a is b for a, b in zip(r.state.spilled, stored.spilled, strict=True))
