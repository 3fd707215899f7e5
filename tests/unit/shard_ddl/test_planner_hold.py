"""The Spark planner with a shard-DDL gate: a shard waiting at its DDL holds only its own
events, the other shards keep flowing, and the held events come out in order once released."""

from __future__ import annotations

from rowbus.protocol.events import Op
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from tests.unit.spark_apply.events import ddl, resolved, row, table

T = "topic"
EXPECTED = [(T, 0, "s1"), (T, 1, "s1")]
A, B = table(name="t_a"), table(name="t_b")
A2 = table(name="t_a", columns=("id", "v", "w"))


def envs(*items: tuple[int, object]) -> list[Envelope]:
    offsets: dict[int, int] = {}
    out = []
    for partition, event in items:
        off = offsets.get(partition, 0)
        offsets[partition] = off + 1
        out.append(Envelope(T, partition, off, event))  # type: ignore[arg-type]
    return out


def test_a_waiting_shard_holds_only_itself_then_resyncs_from_the_stash() -> None:
    stmt = "ALTER TABLE t_a ADD w INT"
    batch = envs(
        (0, row(10, Op.INSERT, after=(1, "a"), tbl=A)),
        (0, ddl(20, stmt, A2)),
        (1, ddl(20, stmt, A2)),  # the DDL is broadcast to every partition
        (0, row(30, Op.INSERT, after=(2, "a", 5), tbl=A2)),
        (1, row(35, Op.INSERT, after=(3, "b"), tbl=B)),
        (0, resolved(40)),
        (1, resolved(40)),
    )
    asked: list[int] = []

    def waiting(env: Envelope) -> bool:
        asked.append(env.event.ts)
        return False

    p = plan(PlannerState(), batch, EXPECTED, ddl_ready=waiting)
    assert [(e.event.ts, e.event.table) for e in p.steps[-1].rows] == [(10, "t_a"), (35, "t_b")]  # type: ignore[union-attr]
    assert [e.event.ts for e in p.state.stash] == [20, 30]  # broadcast copies count once
    assert asked == [20]
    # restored from the sink's stash, the next batch releases the shard once its lock is done
    state = PlannerState.from_bytes(p.state.to_bytes())
    p2 = plan(state, envs((0, resolved(50)), (1, resolved(50))), EXPECTED, ddl_ready=lambda e: True)
    assert p2.steps[0].ddl is not None
    assert p2.steps[0].rows == ()
    assert [e.event.ts for e in p2.steps[1].rows] == [30]
    assert p2.state.stash == []


def test_a_transaction_spanning_a_waiting_shard_is_split_across_stored_batches() -> None:
    """Issue 28 through the planner (both apply modes plan with it): the part on the shared
    table goes in this batch, the part on the waiting shard is stored with the state and
    follows the DDL once, after a restart from the stored bytes."""
    stmt = "ALTER TABLE t_a ADD w INT"
    both = "s1-x"
    batch = envs(
        (0, ddl(20, stmt, A2)),
        (1, ddl(20, stmt, A2)),
        (0, row(30, Op.INSERT, after=(2, "a", 5), tbl=A2, index=0, count=2, txn=both)),
        (1, row(30, Op.INSERT, after=(7, "m"), tbl=B, index=1, count=2, txn=both)),
        (1, row(35, Op.INSERT, after=(8, "m"), tbl=B)),
        (0, resolved(40)),
        (1, resolved(40)),
    )
    p = plan(PlannerState(), batch, EXPECTED, ddl_ready=lambda e: False)
    assert [(e.event.ts, e.event.table) for s in p.steps for e in s.rows] == [  # type: ignore[union-attr]
        (30, "t_b"),
        (35, "t_b"),
    ]
    assert p.state.split == {("s1", both): 1}
    state = PlannerState.from_bytes(p.state.to_bytes())
    assert state.split == {("s1", both): 1}
    # the same records read again (a replay past the stored offsets) come out nothing twice
    p2 = plan(state, [*batch, *envs((0, resolved(50)), (1, resolved(50)))], EXPECTED)
    assert p2.steps[0].ddl is not None
    assert [(e.event.ts, e.event.table) for s in p2.steps for e in s.rows] == [(30, "t_a")]  # type: ignore[union-attr]
    assert p2.state.stash == [] and p2.state.split == {}
