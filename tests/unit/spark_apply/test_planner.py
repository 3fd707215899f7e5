from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol.events import Op
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from tests.unit.spark_apply.events import ddl, resolved, row, table

T = "topic"
EXPECTED = [(T, 0, "s1"), (T, 1, "s1")]


def envs(*items: tuple[int, object]) -> list[Envelope]:
    """Envelopes with offsets numbered per partition in the given order."""
    next_offset: dict[int, int] = {}
    out = []
    for partition, event in items:
        off = next_offset.get(partition, 0)
        next_offset[partition] = off + 1
        out.append(Envelope(T, partition, off, event))  # type: ignore[arg-type]
    return out


def test_nothing_is_released_until_every_partition_is_resolved() -> None:
    batch = envs((0, row(5, Op.INSERT, after=(1, "a"))), (0, resolved(10)))
    p = plan(PlannerState(), batch, EXPECTED)
    assert p.row_count == 0
    assert len(p.state.stash) == 1
    p2 = plan(p.state, [Envelope(T, 1, 0, resolved(7))], EXPECTED)
    assert p2.bound == 7
    assert [e.event.ts for e in p2.steps[-1].rows] == [5]
    assert p2.state.stash == []
    assert p2.state.offsets == {(T, 0): 2, (T, 1): 1}


def test_release_follows_ts_then_index_across_partitions() -> None:
    batch = envs(
        (0, row(10, Op.INSERT, after=(1, "a"), index=1, count=2)),
        (1, row(10, Op.INSERT, after=(3, "c"), index=0, count=2)),
        (1, row(20, Op.INSERT, after=(2, "b"))),
        (0, row(30, Op.INSERT, after=(4, "d"))),
        (0, resolved(25)),
        (1, resolved(25)),
    )
    p = plan(PlannerState(), batch, EXPECTED)
    assert [e.event.image[0] for e in p.steps[-1].rows] == [3, 1, 2]  # type: ignore[union-attr]
    assert [e.event.ts for e in p.state.stash] == [30]


def test_cut_at_ddl_makes_steps_and_dedups_broadcast_copies() -> None:
    t2 = table(columns=("id", "v", "w"))
    batch = envs(
        (0, row(10, Op.INSERT, after=(1, "a"))),
        (0, ddl(20, "ALTER TABLE t ADD w INT", t2)),
        (1, ddl(20, "ALTER TABLE t ADD w INT", t2)),
        (1, row(30, Op.INSERT, after=(2, "b", 5), tbl=t2)),
        (0, resolved(40)),
        (1, resolved(40)),
    )
    p = plan(PlannerState(), batch, EXPECTED)
    assert len(p.steps) == 2
    assert [e.event.ts for e in p.steps[0].rows] == [10]
    assert p.steps[0].ddl is not None
    assert [e.event.ts for e in p.steps[1].rows] == [30]
    assert p.steps[1].ddl is None


def test_a_ddl_not_ready_holds_everything_after_it() -> None:
    batch = envs(
        (0, row(10, Op.INSERT, after=(1, "a"))),
        (0, ddl(20, "ALTER TABLE t ADD w INT", table(columns=("id", "v", "w")))),
        (1, row(30, Op.INSERT, after=(2, "b"))),
        (0, resolved(40)),
        (1, resolved(40)),
    )
    p = plan(PlannerState(), batch, EXPECTED, ddl_ready=lambda e: False)
    assert [e.event.ts for e in p.steps[-1].rows] == [10]
    assert [e.event.ts for e in p.state.stash] == [20, 30]


def test_events_that_do_not_advance_are_dropped() -> None:
    ev = row(10, Op.INSERT, after=(1, "a"))
    batch = envs((0, ev), (0, ev), (0, resolved(10)), (1, resolved(10)))
    p = plan(PlannerState(), batch, EXPECTED)
    assert p.dropped == 1
    assert p.row_count == 1


def test_state_round_trips_through_bytes() -> None:
    batch = envs(
        (0, row(10, Op.UPDATE, before=(1, "a"), after=(1, "b"))),
        (0, ddl(20, "ALTER TABLE t ADD w INT", table(columns=("id", "v", "w")))),
        (0, resolved(15)),
    )
    p = plan(PlannerState(), batch, EXPECTED)
    again = PlannerState.from_bytes(p.state.to_bytes())
    assert again == p.state


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1), st.integers(1, 50)), min_size=1, max_size=40),
    st.lists(st.integers(1, 39), max_size=4),
)
def test_any_split_into_batches_releases_the_same_sequence(
    rows: list[tuple[int, int]], cuts: list[int]
) -> None:
    """Replay determinism and batch independence: however the records are split into batches,
    the released sequence is the same, and equals releasing them all at once."""
    items: list[tuple[int, object]] = []
    last_ts = {0: 0, 1: 0}
    for i, (partition, step) in enumerate(rows):
        last_ts[partition] += step
        items.append(
            (partition, row(last_ts[partition] * 100 + partition, Op.INSERT, after=(i, "x")))
        )
    items += [(0, resolved(10**9)), (1, resolved(10**9))]
    all_envs = envs(*items)
    whole = plan(PlannerState(), all_envs, EXPECTED)
    order = sorted(all_envs, key=lambda e: (e.offset, e.partition))
    bounds = sorted({0, len(order), *[c for c in cuts if c < len(order)]})
    state, released = PlannerState(), []
    for a, b in itertools.pairwise(bounds):
        p = plan(state, order[a:b], EXPECTED)
        assert plan(state, order[a:b], EXPECTED) == p
        state = p.state
        released += [e for s in p.steps for e in s.rows]
    assert released == [e for s in whole.steps for e in s.rows]
    assert state.stash == []


def test_a_source_not_expected_on_a_topic_gates_it_too() -> None:
    """A second source on a topic (e.g. two readers sharing one) joins the gate: its rows wait
    for its own watermark instead of riding on the expected source's."""
    batch1 = envs(
        (1, row(8, Op.INSERT, after=(1, "a"), source="s2")),
        (0, resolved(10)),
        (1, resolved(10)),
    )
    p1 = plan(PlannerState(), batch1, EXPECTED)
    assert p1.row_count == 0
    batch2 = [
        Envelope(T, 0, 1, row(6, Op.INSERT, after=(2, "b"), source="s2")),
        Envelope(T, 0, 2, resolved(10, source="s2")),
        Envelope(T, 1, 2, resolved(10, source="s2")),
    ]
    p2 = plan(p1.state, batch2, EXPECTED)
    assert [e.event.ts for s in p2.steps for e in s.rows] == [6, 8]


def test_an_incomplete_transaction_waits_for_its_last_event() -> None:
    """`txn.count` says how many events a transaction has: one passed by the watermark with
    an event missing is held whole, never split over two batches."""
    batch1 = envs(
        (0, row(10, Op.INSERT, after=(1, "a"), index=0, count=2)),
        (0, resolved(20)),
        (1, resolved(20)),
    )
    p1 = plan(PlannerState(), batch1, EXPECTED)
    assert p1.row_count == 0
    p2 = plan(
        p1.state,
        [Envelope(T, 1, 1, row(10, Op.INSERT, after=(2, "b"), index=1, count=2))],
        EXPECTED,
    )
    assert [e.event.image[0] for e in p2.steps[-1].rows] == [1, 2]  # type: ignore[union-attr]


def test_a_rerun_batch_plans_the_same_whatever_the_live_metadata_says() -> None:
    """The gating lanes are stored with the state: a re-run batch that sees more partitions
    in the live metadata still plans what it planned the first time."""
    p0 = plan(PlannerState(), envs((0, resolved(5)), (1, resolved(5))), EXPECTED)
    batch = [Envelope(T, 0, 1, row(10, Op.INSERT, after=(1, "a"))), Envelope(T, 0, 2, resolved(20))]
    batch.append(Envelope(T, 1, 1, resolved(20)))
    first = plan(p0.state, batch, EXPECTED)
    rerun = plan(p0.state, batch, [*EXPECTED, (T, 2, "s1")])
    assert first == rerun
    assert first.row_count == 1
