"""Issue #33: a batch plan over a transaction that lost a record, and the job's stall report."""

from __future__ import annotations

from rowbus.protocol.events import Op
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.stall import StallReporter
from tests.unit.spark_apply.events import resolved, row

T = "topic"
EXPECTED = [(T, 0, "s1")]


def x(index: int) -> object:
    """Event `index` of transaction s1-10 (3 events), as the source wrote it."""
    return row(10, Op.INSERT, after=(index, "a"), index=index, count=3)


def batches_with_a_lost_record() -> list[list[Envelope]]:
    """Index 1 of s1-10 lost by the broker; the next transaction and watermarks go on."""
    first = [x(0), x(2), row(20, Op.INSERT, after=(9, "b")), resolved(30)]
    out = [[Envelope(T, 0, o, e) for o, e in enumerate(first)]]  # type: ignore[arg-type]
    for n in range(8):
        out.append([Envelope(T, 0, len(first) + n, resolved(40 + n))])
    return out


def test_a_lost_record_published_again_is_released_in_binlog_order() -> None:
    state = PlannerState()
    for batch in batches_with_a_lost_record()[:3]:
        p = plan(state, batch, EXPECTED)
        assert p.row_count == 0
        assert p.held is not None and "2 of 3 events" in p.held
        state = p.state
    # The reader, restarted from an older checkpoint, publishes s1-10 and s1-20 again.
    replay = [x(0), x(1), x(2), row(20, Op.INSERT, after=(9, "b")), resolved(50)]
    p = plan(state, [Envelope(T, 0, 20 + o, e) for o, e in enumerate(replay)], EXPECTED)  # type: ignore[arg-type]
    released = [(e.event.ts, e.event.txn.index) for e in p.steps[-1].rows if e.event.txn]
    assert released == [(10, 0), (10, 1), (10, 2), (20, 0)]
    assert p.state.stash == [] and p.held is None and p.blockers == ()


def test_a_job_that_holds_without_releasing_says_what_it_waits_for() -> None:
    now = [0.0]
    reporter = StallReporter(min_batches=5, interval_s=60.0, clock=lambda: now[0])
    state = PlannerState()
    lines = []
    for batch_id, batch in enumerate(batches_with_a_lost_record()):
        p = plan(state, batch, EXPECTED)
        state = p.state
        now[0] += 20.0
        stash = state.stash_events
        lines.append(reporter.observe(batch_id, p.row_count, stash, p.bound, p.held, p.blockers))
    said = [(i, line) for i, line in enumerate(lines) if line is not None]
    assert [i for i, _ in said] == [4, 7]  # from the 5th held batch on, once a minute at most
    line = said[0][1]
    assert "5 batches in a row" in line and "3 events are held" in line
    assert "transaction s1-10 of source s1" in line and "first at topic[0]@0" in line
    assert "has 2 of 3 events although the watermark passed its ts 10" in line
    # A batch that applies rows ends the stall; a new one is counted from zero.
    assert reporter.observe(9, 1, 2, 60, p.held, p.blockers) is None
    assert reporter.observe(10, 0, 2, 60, p.held, p.blockers) is None
