"""A shard waiting for its DDL lock holds only its own later rows (issue 28).

Shard A's DDL is refused by the gate; then a transaction writes shard A and the shared table M,
another writes shard B and M, then M alone, then shard B reaches its own DDL. The old rule held
every table a held transaction touched (transitively), so B's DDL was never even asked for and
the lock that waits for B could never complete: a wedge. Now the transaction spanning A and M is
split: its part on M goes now (same id, ts, order), its part on A follows A's DDL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rowbus.merge.hold import hold
from rowbus.merge.merger import Merger
from rowbus.merge.spill import SpillStore
from rowbus.merge.state import MergerState
from rowbus.merge.transaction import KafkaPosition, Transaction
from rowbus.protocol.events import BinlogPosition, DdlChange, Event, Resolved
from rowbus.testing import events

BASE = 1_700_000_000_000 << 16
A, B, M = (events.table(name=n) for n in ("orders_1", "orders_2", "moves"))
LANES = [("a", 0, "s1"), ("a", 1, "s1")]


def _row(ts: int, txn: str, index: int, count: int, offset: int, tbl: object) -> Event:
    return events.row(
        BASE + ts,
        after=(offset * 10 + index, f"{txn}{index}"),
        tbl=tbl,  # type: ignore[arg-type]
        index=index,
        count=count,
        txn=txn,
        position=BinlogPosition("bin.000001", offset, txn),
    )


def _ddl(ts: int, tbl: object, offset: int) -> Event:
    name = tbl.table  # type: ignore[attr-defined]
    return events.ddl(
        BASE + ts,
        f"ALTER TABLE {name} ADD note INT",
        tbl,  # type: ignore[arg-type]
        position=BinlogPosition("bin.000001", offset),
    )


DDL_A = "ddl:bin.000001:100"
DDL_B = "ddl:bin.000001:500"


def records() -> list[tuple[int, Event]]:
    """(partition, event): shard tables on partition 0, the shared table on partition 1."""
    return [
        (0, _ddl(1, A, 100)),
        (1, _ddl(1, A, 100)),  # a DDL is broadcast to every partition
        (0, _row(2, "am", 0, 2, 200, A)),
        (1, _row(2, "am", 1, 2, 200, M)),
        (0, _row(3, "bm", 0, 2, 300, B)),
        (1, _row(3, "bm", 1, 2, 300, M)),
        (1, _row(4, "m", 0, 1, 400, M)),
        (0, _ddl(5, B, 500)),
        (1, _ddl(5, B, 500)),
        (0, _row(6, "a2", 0, 1, 600, A)),
        (0, Resolved(source="s1", ts=BASE + 7)),
        (1, Resolved(source="s1", ts=BASE + 7)),
    ]


def push_all(merger: Merger, items: list[tuple[int, Event]], offsets: dict[int, int]) -> None:
    for partition, event in items:
        offset = offsets.get(partition, 0)
        offsets[partition] = offset + 1
        merger.push("a", partition, offset, event)


class Gate:
    """A lock per shard DDL; `open` says which are done. Records what was asked."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.asked: list[str] = []

    def __call__(self, event: DdlChange, at: KafkaPosition) -> bool:
        assert event.table is not None
        self.asked.append(event.table)
        return event.table in self.open


def rows(txns: list[Transaction]) -> list[tuple[str, str | None]]:
    return [(t.id, e.table) for t in txns for e in t.events]


def drain(merger: Merger, gate: Gate) -> list[Transaction]:
    out: list[Transaction] = []
    for _ in range(100):
        got = merger.release(until_ddl=True, ddl_ready=gate)
        if not got:
            return out
        out += got
    raise AssertionError("release never ran dry")


@pytest.mark.parametrize("memory_limit", [None, 1], ids=["in-memory", "spilled"])
def test_a_waiting_shard_holds_only_its_own_rows_and_splits_what_spans_it(
    memory_limit: int | None,
) -> None:
    spill = SpillStore() if memory_limit else None
    merger = Merger(LANES, memory_limit=memory_limit, spill=spill)
    push_all(merger, records(), {})
    gate = Gate()
    first = drain(merger, gate)
    # M's rows and B's rows flow; B's DDL reaches the gate (before the fix it never did;
    # each release asks again: the gate, not the merger, remembers)
    assert list(dict.fromkeys(gate.asked)) == ["orders_1", "orders_2"]
    assert rows(first) == [("am", "moves"), ("bm", "orders_2"), ("bm", "moves"), ("m", "moves")]
    split = first[0]
    assert (split.id, split.ts, split.first) == ("am", BASE + 2, KafkaPosition("a", 1, 1))
    assert merger.stats.split_transactions == 1
    # held: A's DDL, A's part of "am", A's later row, B's DDL (nothing else)
    assert merger.buffered == 4
    # the locks complete; the held rows follow in order, each DDL first
    gate.open = {"orders_1", "orders_2"}
    second = drain(merger, gate)
    assert [(t.id, t.is_ddl) for t in second] == [
        (DDL_A, True),
        ("am", False),
        (DDL_B, True),
        ("a2", False),
    ]
    assert rows(second)[1] == ("am", "orders_1")
    assert merger.buffered == 0
    merger.close()
    if spill is not None:
        spill.close()


def test_a_split_keeps_the_resume_offset_at_its_held_part_only() -> None:
    """The checkpoint after the released part: the partition holding the remainder resumes at
    the remainder; the partition of the released part moves on."""
    lanes = [("a", p, "s1") for p in range(3)]
    merger = Merger(lanes)
    items = [
        (0, _ddl(1, A, 100)),
        (1, _ddl(1, A, 100)),
        (2, _ddl(1, A, 100)),
        (1, _row(2, "am", 0, 2, 200, A)),
        (2, _row(2, "am", 1, 2, 200, M)),
        *((p, Resolved(source="s1", ts=BASE + 3)) for p in range(3)),
    ]
    push_all(merger, items, {})
    released = drain(merger, Gate())
    assert rows(released) == [("am", "moves")]
    cp = released[0].checkpoint
    assert cp.offsets == {("a", 0): 0, ("a", 1): 1, ("a", 2): 3}
    assert merger.checkpoint().offsets == cp.offsets
    merger.close()


@pytest.mark.parametrize("keep_spilled", [False, True], ids=["stash", "spilled"])
def test_a_split_remainder_survives_a_restart_once(keep_spilled: bool) -> None:
    """Release with a split, take the state, rebuild (the records re-read as a restarted reader
    would), open the gate: every row exactly once, the held part after its DDL."""
    spill = SpillStore()
    merger = Merger(LANES, memory_limit=1 if keep_spilled else None, spill=spill)
    offsets: dict[int, int] = {}
    push_all(merger, records(), offsets)
    before = drain(merger, Gate())
    if keep_spilled:
        merger.spill_all()
    state = merger.state(keep_spilled=keep_spilled)
    if not keep_spilled:
        state = MergerState.from_json(state.to_json())
    rebuilt = Merger.from_state(state, spill=spill)
    # everything read before comes again (a partition re-read from its resume offset):
    # nothing of it may come out a second time
    replay = {0: 0, 1: 0}
    push_all(rebuilt, records(), replay)
    gate = Gate()
    gate.open = {"orders_1", "orders_2"}
    push_all(rebuilt, [(0, Resolved(source="s1", ts=BASE + 9))], offsets)
    after = drain(rebuilt, gate)
    got = rows(before) + rows(after)
    expected = [(t, e.table) for _, e in records() if (t := _id(e)) is not None]
    assert sorted(got, key=str) == sorted(set(expected), key=str)
    assert len(got) == len(set(got))
    assert [t.id for t in after] == [DDL_A, "am", DDL_B, "a2"]
    rebuilt.close()
    spill.close()


def _id(event: Event) -> str | None:
    if isinstance(event, DdlChange):
        return f"ddl:{event.position}"
    return getattr(event, "txn", None) and event.txn.id  # type: ignore[attr-defined,no-any-return]


def test_the_hold_rule() -> None:
    held = {"a", "b"}
    assert (hold({"a"}, held).held, hold({"a"}, held).split) == (True, False)
    assert (hold({"m"}, held).held, hold({"m"}, held).split) == (False, False)
    split = hold({"a", "m"}, held)
    assert (split.go, split.stay, split.split, split.held) == ({"m"}, {"a"}, True, True)


STORED = Path(__file__).with_name("merger_state_stored.jsonl")
"""The state this scenario leaves (stash, then spilled), as the code wrote it before the merger's
record was renamed from `MergerSnapshot` to `MergerState`: one JSON document a line."""


def _held_state_merger(keep_spilled: bool, spill: SpillStore) -> Merger:
    merger = Merger(LANES, memory_limit=1 if keep_spilled else None, spill=spill)
    push_all(merger, records(), {})
    drain(merger, Gate())
    if keep_spilled:
        merger.spill_all()
    return merger


@pytest.mark.parametrize("keep_spilled", [False, True], ids=["stash", "spilled"])
def test_the_stored_state_is_byte_identical_across_the_rename(keep_spilled: bool) -> None:
    """A planner's stored state outlives the code that wrote it: the renamed record writes the
    very document the old one did, and reads the old one back to the same bytes."""
    stored = STORED.read_text().splitlines()[keep_spilled]
    spill = SpillStore()
    merger = _held_state_merger(keep_spilled, spill)
    assert merger.state(keep_spilled=keep_spilled).to_json() == stored
    assert MergerState.from_json(stored).to_json() == stored
    rebuilt = Merger.from_state(MergerState.from_json(stored), spill=spill)
    assert rebuilt.state(keep_spilled=keep_spilled).to_json() == stored
    merger.close()
    rebuilt.close()
    spill.close()


def test_the_old_state_names_still_work_and_say_they_are_deprecated() -> None:
    spill = SpillStore()
    merger = _held_state_merger(True, spill)
    with pytest.warns(DeprecationWarning, match=r"Merger\.state\(\)"):
        old = merger.snapshot(keep_spilled=True)
    assert old.to_json() == merger.state(keep_spilled=True).to_json()
    with pytest.warns(DeprecationWarning, match=r"Merger\.from_state\(\)"):
        rebuilt = Merger.from_snapshot(old, spill=spill)
    assert rebuilt.state(keep_spilled=True).to_json() == old.to_json()
    merger.close()
    rebuilt.close()
    spill.close()
