"""The merger against a sorted reference, for random interleavings, replays and resumes."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.merger import Merger
from rowbus.merge.state import MergerState
from rowbus.merge.transaction import KafkaPosition, Transaction
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    MarkerMode,
    Op,
    Resolved,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from tests.unit.consumers.adapters import ADAPTERS, Adapter, Released
from tests.unit.consumers.scenario import BASE_TS, TABLE, Scenario, ddl, row, scenarios

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def summary(txns: list[Transaction]) -> list[tuple[str, str, int, list[object]]]:
    return [(t.source, t.id, t.ts, list(t.events)) for t in txns]


def feed(
    data: st.DataObject,
    merger: Merger | Adapter,
    scenario: Scenario,
    cursors: dict[tuple[str, int], int],
    out: list[Any],
    stop_after: int | None = None,
) -> None:
    """Push records from random partitions, releasing now and then; `stop_after` pushes."""
    pushed = 0
    while stop_after is None or pushed < stop_after:
        open_parts = [tp for tp, recs in scenario.partitions.items() if cursors[tp] < len(recs)]
        if not open_parts:
            break
        tp = data.draw(st.sampled_from(sorted(open_parts)))
        offset = cursors[tp]
        merger.push(tp[0], tp[1], offset, scenario.partitions[tp][offset])
        cursors[tp] = offset + 1
        pushed += 1
        if data.draw(st.integers(0, 3)) == 0:
            out += merger.release(until_ddl=data.draw(st.booleans()))


def drain(merger: Merger | Adapter, out: list[Any]) -> None:
    for _ in range(10_000):
        batch = merger.release(until_ddl=True)
        if not batch:
            return
        out += batch


# The sorted-reference tests run against both adapters of the one merge engine: what the
# Subscriber and the Spark job's planner release must be the same transactions, in order.
@SETTINGS
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@given(scenario=scenarios(), data=st.data(), limit=st.sampled_from([None, 1, 3]))
def test_output_equals_sorted_reference(
    adapter: str, scenario: Scenario, data: st.DataObject, limit: int | None
) -> None:
    merger = ADAPTERS[adapter](scenario.lanes, memory_limit=limit)
    out: list[Released] = []
    feed(data, merger, scenario, dict.fromkeys(scenario.partitions, 0), out)
    drain(merger, out)
    assert out == scenario.reference
    assert merger.release(until_ddl=True) == []
    merger.close()


@SETTINGS
@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
@given(scenario=scenarios(), data=st.data())
def test_resume_from_state_loses_and_repeats_nothing(
    adapter: str, scenario: Scenario, data: st.DataObject
) -> None:
    first = ADAPTERS[adapter](scenario.lanes, memory_limit=data.draw(st.sampled_from([None, 2])))
    out: list[Released] = []
    cursors = dict.fromkeys(scenario.partitions, 0)
    feed(data, first, scenario, cursors, out, stop_after=data.draw(st.integers(0, 40)))
    second = first.restarted()
    feed(data, second, scenario, cursors, out)
    drain(second, out)
    assert out == scenario.reference
    first.close()


@SETTINGS
@given(scenario=scenarios(), data=st.data())
def test_state_offsets_are_where_a_rebuilt_merger_reads_on(
    scenario: Scenario, data: st.DataObject
) -> None:
    first = Merger(scenario.lanes, memory_limit=data.draw(st.sampled_from([None, 2])))
    cursors = dict.fromkeys(scenario.partitions, 0)
    feed(data, first, scenario, cursors, [], stop_after=data.draw(st.integers(0, 40)))
    state = MergerState.from_json(first.state().to_json())
    assert dict(state.offsets) == {tp: c for tp, c in cursors.items() if c}
    first.close()


@SETTINGS
@given(scenario=scenarios(), data=st.data())
def test_resume_from_checkpoint_loses_and_repeats_nothing(
    scenario: Scenario, data: st.DataObject
) -> None:
    first = Merger(scenario.lanes)
    out: list[Transaction] = []
    cursors = dict.fromkeys(scenario.partitions, 0)
    feed(data, first, scenario, cursors, out, stop_after=data.draw(st.integers(0, 40)))
    # a subscriber stored the checkpoint of some delivered transaction, then crashed
    kept = data.draw(st.integers(0, len(out)))
    delivered = out[:kept]
    checkpoint = delivered[-1].checkpoint if delivered else Checkpoint()
    second = Merger(
        scenario.lanes,
        floors=checkpoint.floors,
        start_offsets=checkpoint.offsets,
        watermarks=checkpoint.watermarks,
    )
    resumed = {tp: checkpoint.offsets.get(tp, 0) for tp in scenario.partitions}
    again: list[Transaction] = list(delivered)
    feed(data, second, scenario, resumed, again)
    drain(second, again)
    assert summary(again) == scenario.reference
    # the resumed merger's checkpoints carry on from the stored one, never behind it
    previous = checkpoint
    for txn in again[kept:]:
        txn.checkpoint.check_follows(previous)
        previous = txn.checkpoint


@SETTINGS
@given(scenario=scenarios(), data=st.data())
def test_checkpoints_never_move_backwards(scenario: Scenario, data: st.DataObject) -> None:
    merger = Merger(scenario.lanes)
    out: list[Transaction] = []
    feed(data, merger, scenario, dict.fromkeys(scenario.partitions, 0), out)
    drain(merger, out)
    previous = None
    for txn in out:
        txn.checkpoint.check_follows(previous)
        previous = txn.checkpoint


def test_a_silent_source_stalls_the_merge_and_is_named() -> None:
    now = [100.0]
    lanes = [("a", 0, "s1"), ("a", 1, "s1"), ("b", 0, "s2")]
    merger = Merger(lanes, clock=lambda: now[0])
    ts = BASE_TS + 10
    merger.push("a", 0, 0, row("s1", ts, "x", 0, 1, 10))
    for p in (0, 1):
        merger.push("a", p, 1, Resolved(source="s1", ts=ts))
    now[0] = 130.0
    assert merger.release() == []
    blockers = merger.blocked_by()
    assert [(b.topic, b.partition, b.source) for b in blockers] == [("b", 0, "s2")]
    assert blockers[0].silent_s == 30.0
    assert "no watermark yet" in str(blockers[0])
    merger.push("b", 0, 0, Resolved(source="s2", ts=ts))
    assert [t.id for t in merger.release()] == ["x"]
    assert merger.blocked_by()  # with nothing stashed it names the lowest lanes


def test_an_incomplete_transaction_is_held_and_reported() -> None:
    merger = Merger([("a", 0, "s1"), ("a", 1, "s1")])
    ts = BASE_TS + 5
    merger.push("a", 0, 0, row("s1", ts, "x", 0, 2, 10))
    for p in (0, 1):
        merger.push("a", p, 1, Resolved(source="s1", ts=ts + 1))
    assert merger.release() == []
    assert "has 1 of 2 events" in str(merger.blocked_by()[0])
    merger.push("a", 1, 2, row("s1", ts, "x", 1, 2, 10))
    assert [len(t) for t in merger.release()] == [2]


@pytest.mark.parametrize("memory_limit", [None, 1])  # 1: the held runs are spilled
def test_a_lost_record_published_again_completes_its_transaction(memory_limit: int | None) -> None:
    # Issue #33 (nemesis seed 3): the broker lost an acknowledged record of transaction x
    # (noida-db on kill -9) while later ones of the lane stayed; the reader, restarted from
    # an older checkpoint, published x again. The lost record's key is below the lane's last
    # one: dropped as a duplicate, it held x, and every transaction after it, forever.
    merger = Merger([("a", 0, "s1")], memory_limit=memory_limit)
    ts = BASE_TS + 5
    first = [row("s1", ts, "x", 0, 3, 10), row("s1", ts, "x", 2, 3, 10)]  # index 1 lost
    first += [row("s1", ts + 1, "y", 0, 1, 20), Resolved(source="s1", ts=ts + 2)]
    for offset, event in enumerate(first):
        merger.push("a", 0, offset, event)
    assert merger.release() == []
    assert "has 2 of 3 events" in str(merger.blocked_by()[0])
    replay = [row("s1", ts, "x", i, 3, 10) for i in range(3)] + [row("s1", ts + 1, "y", 0, 1, 20)]
    for offset, event in enumerate(replay, start=len(first)):
        merger.push("a", 0, offset, event)
    merger.push("a", 0, len(first) + len(replay), Resolved(source="s1", ts=ts + 3))
    out = merger.release()
    assert [(t.id, [e.txn.index for e in t.events if e.txn]) for t in out] == [
        ("x", [0, 1, 2]),
        ("y", [0]),
    ]
    assert merger.stats.duplicates == 3  # the replayed events the stash already held
    assert memory_limit is None or merger.stats.spilled_events > 0
    merger.close()


def test_a_ddl_ends_a_batch_and_comes_after_the_rows_before_it() -> None:
    merger = Merger([("a", 0, "s1")])
    ts = BASE_TS
    merger.push("a", 0, 0, row("s1", ts + 1, "x", 0, None, 10))
    merger.push("a", 0, 1, ddl("s1", ts + 2, 20))
    merger.push("a", 0, 2, row("s1", ts + 3, "y", 0, None, 30))
    merger.push("a", 0, 3, Resolved(source="s1", ts=ts + 3))
    first = merger.release(until_ddl=True)
    assert [t.id for t in first] == ["x", "ddl:bin.000001:20"]
    assert first[-1].ddl is not None
    assert [t.id for t in merger.release(until_ddl=True)] == ["y"]


def test_a_refused_ddl_holds_only_its_table_and_splits_what_joins_it() -> None:
    """A DDL the gate refuses holds its table only; a transaction touching that table and
    another is split (its other part goes now, in order); other tables flow, spilled or not
    (tests/unit/consumers/test_shard_hold.py has the wedge this avoids)."""
    other = TableSchema("db", "u", TABLE.columns, TABLE.primary_key)
    third = TableSchema("db", "w", TABLE.columns, TABLE.primary_key)
    merger = Merger([("a", 0, "s1")], memory_limit=1)
    ts = BASE_TS
    merger.push("a", 0, 0, ddl("s1", ts + 1, 10))  # ALTER TABLE t
    both = [
        row("s1", ts + 2, "tu", 0, 2, 20),
        replace(row("s1", ts + 2, "tu", 1, 2, 21), table="u"),
    ]
    merger.push("a", 0, 1, both[0])
    merger.push("a", 0, 2, both[1])
    merger.push("a", 0, 3, replace(row("s1", ts + 3, "u", 0, 1, 30), table=other.table))
    merger.push("a", 0, 4, replace(row("s1", ts + 4, "w", 0, 1, 40), table=third.table))
    merger.push("a", 0, 5, Resolved(source="s1", ts=ts + 5))
    asked: list[KafkaPosition] = []

    def refuse(event: DdlChange, at: KafkaPosition) -> bool:
        asked.append(at)
        return False

    first = merger.release(until_ddl=True, ddl_ready=refuse)
    assert [(t.id, [e.table for e in t.events]) for t in first] == [
        ("tu", ["u"]),
        ("u", ["u"]),
        ("w", ["w"]),
    ]
    assert asked == [KafkaPosition("a", 0, 0)]
    out = merger.release(until_ddl=True, ddl_ready=lambda e, at: True)
    assert [t.id for t in out] == ["ddl:bin.000001:10"]
    assert [(t.id, [e.table for e in t.events]) for t in merger.release(until_ddl=True)] == [
        ("tu", ["t"])
    ]
    merger.close()


def test_an_unexpected_source_joins_the_lanes_of_its_topic() -> None:
    merger = Merger([("a", 0, "s1"), ("a", 1, "s1")])
    merger.push("a", 0, 0, row("s9", BASE_TS, "z", 0, None, 10))
    for p in (0, 1):
        merger.push("a", p, 1, Resolved(source="s1", ts=BASE_TS + 1))
    assert merger.release() == []
    assert {(b.partition, b.source) for b in merger.blocked_by()} == {(0, "s9"), (1, "s9")}


def test_watermarks_never_move_backwards() -> None:
    merger = Merger([("a", 0, "s1")])
    merger.push("a", 0, 0, Resolved(source="s1", ts=BASE_TS + 9))
    merger.push("a", 0, 1, Resolved(source="s1", ts=BASE_TS + 3))
    assert merger.watermark == BASE_TS + 9


@SETTINGS
@given(scenario=scenarios())
def test_lazy_checkpoints_do_not_depend_on_the_order_they_are_asked_for(
    scenario: Scenario,
) -> None:
    # two mergers fed alike; one is asked for its checkpoints in order, the other backwards
    runs: list[list[Transaction]] = [[], []]
    for out in runs:
        merger = Merger(scenario.lanes)
        for (topic, partition), records in sorted(scenario.partitions.items()):
            for offset, event in enumerate(records):
                merger.push(topic, partition, offset, event)
            out.extend(merger.release())
        drain(merger, out)
    forward = [t.checkpoint for t in runs[0]]
    backward = [t.checkpoint for t in reversed(runs[1])][::-1]
    assert forward == backward
    for before, after in itertools.pairwise(forward):
        after.check_follows(before)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_release_order_is_ts_source_then_the_order_key_of_the_first_event(adapter: str) -> None:
    """PROTOCOL.md §9 step 6 (1.5): within one ts a snapshot's CREATEs (`snapshot:…:create`)
    go before its rows (`snapshot:…:0`, which sorts first as a string: the 1.4 text's
    `(ts, source, txn.id, txn.index)` put the rows first), and a DDL without a `txn` takes
    index 0 at its position."""
    ts = BASE_TS + 7
    at = BinlogPosition("bin.000003", 500)
    creates = [
        replace(
            ddl("s1", ts, 500),
            statement=statement,
            position=at,
            txn=TxnRef("snapshot:0:db.t:create", index),
        )
        for index, statement in (
            (4, "CREATE DATABASE IF NOT EXISTS db"),
            (5, "CREATE TABLE IF NOT EXISTS t (id BIGINT PRIMARY KEY, v INT)"),
        )
    ]
    rows = [
        replace(
            row("s1", ts, "snapshot:0:db.t:0", index, None, 500),
            op=Op.READ,
            position=at,
        )
        for index in (6, 7)
    ]
    bare = replace(ddl("s1", ts, 400), position=BinlogPosition("bin.000003", 400), txn=None)
    # Each partition in binlog order, as a reader writes it (DDLs on every partition); the
    # rows' partition is read first.
    partitions = {1: [bare, *creates, *rows, Resolved(source="s1", ts=ts)]}
    partitions[0] = [bare, *creates, Resolved(source="s1", ts=ts)]
    merger = ADAPTERS[adapter]([("a", 0, "s1"), ("a", 1, "s1")])
    for partition, records in partitions.items():
        for offset, event in enumerate(records):
            merger.push("a", partition, offset, event)
    out: list[Released] = []
    drain(merger, out)
    released = [event for *_, events in out for event in events]
    assert released == [bare, *creates, *rows]
    merger.close()


def _marker(kind: type, ts: int, index: int, at: BinlogPosition) -> SnapshotBegin | SnapshotEnd:
    fields: dict[str, Any] = {
        "source": "s1",
        "ts": ts,
        "schema": TABLE.schema,
        "table": TABLE.table,
        "snapshot": "snapshot:0/bin.000003:500:db.t",
        "mode": MarkerMode.REPLACE,
        "position": at,
        "txn": TxnRef(f"snapshot:0/bin.000003:500:db.t:{kind.__name__}", index),
    }
    return SnapshotEnd(**fields, rows=2) if kind is SnapshotEnd else SnapshotBegin(**fields)


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_snapshot_markers_are_barriers_released_once_around_their_rows(adapter: str) -> None:
    """PROTOCOL.md §9.7: a begin and an end are broadcast to every partition like a DDL and
    released once each, in their place: the begin (index below the CREATE's) before the
    table's definition and rows, the end after its last row and before what the stream
    wrote later; each ends a merger's batch (`until_ddl`)."""
    ts = BASE_TS + 7
    at = BinlogPosition("bin.000003", 500)
    begin = _marker(SnapshotBegin, ts, 3, at)
    create = replace(ddl("s1", ts + 1, 500), position=at, txn=TxnRef("snapshot:0:db.t:create", 4))
    rows = [
        replace(row("s1", ts + 2, "snapshot:0:db.t:0", i, None, 500), op=Op.READ, position=at)
        for i in (5, 6)
    ]
    end = _marker(SnapshotEnd, ts + 3, 7, at)
    later = replace(row("s1", ts + 4, "g1", 0, 1, 900), position=BinlogPosition("bin.000003", 900))
    # rows on partition 1, the barriers on both, as a reader writes them
    partitions = {
        0: [begin, create, end, Resolved(source="s1", ts=ts + 4)],
        1: [begin, create, *rows, end, later, Resolved(source="s1", ts=ts + 4)],
    }
    merger = ADAPTERS[adapter]([("a", 0, "s1"), ("a", 1, "s1")])
    for partition in (1, 0):
        for offset, event in enumerate(partitions[partition]):
            merger.push("a", partition, offset, event)
    out: list[Released] = []
    batches = 0
    for _ in range(20):
        batch = merger.release(until_ddl=True)
        if not batch:
            break
        batches += 1
        out += batch
    released = [event for *_, events in out for event in events]
    assert released == [begin, create, *rows, end, later]
    if adapter == "subscriber":
        assert batches == 4  # the begin, the CREATE and the end each end one
    merger.close()


def test_a_released_marker_says_what_it_is() -> None:
    at = BinlogPosition("bin.000003", 500)
    merger = Merger([("a", 0, "s1")])
    merger.push("a", 0, 0, _marker(SnapshotBegin, BASE_TS + 1, 0, at))
    merger.push("a", 0, 1, Resolved(source="s1", ts=BASE_TS + 1))
    (txn,) = merger.release(until_ddl=True)
    assert txn.is_ddl and txn.ddl is None
    assert isinstance(txn.marker, SnapshotBegin) and txn.marker.position == at
