"""A replayed batch plans with the DDL gate answers of its first attempt: a shard-DDL lock
released between a crash and the replay must not change the steps of a batch whose first steps
are already committed (that would skip or repeat rows)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op
from rowbus.spark_apply.planner import Envelope, PlannerState, plan, stored_gate
from rowbus.spark_apply.sinks import StepWrite
from tests.conftest import connect
from tests.integration.spark_apply.test_sink import EXPECTED, batch, make_sink, rows_of
from tests.unit.spark_apply.events import ddl, resolved, row, table


def test_a_replay_plans_with_the_stored_gate_answers(
    services: Settings,
    unique: Callable[[str], str],
    make_database: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("CREATE TABLE u (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    t, u = table("up", "t"), table("up", "u")
    t2 = table("up", "t", ("id", "v", "w"))
    schemas = {x.schema_id: x for x in (t, u, t2)}
    events = batch(
        row(10, Op.INSERT, after=(1, "a"), tbl=t),
        ddl(15, "ALTER TABLE `up`.`u` COMMENT 'held'", u),  # a shard DDL waiting for its lock
        row(16, Op.INSERT, after=(2, "b"), tbl=u),
        ddl(20, "ALTER TABLE `up`.`t` ADD COLUMN w INT", t2),
        row(30, Op.INSERT, after=(3, "c", 1), tbl=t2),
        resolved(99),
    )
    held = f"{events[1].topic}[0]@{events[1].offset}"

    def waiting(env: Envelope) -> bool:
        return str(env.position).split(" ")[0] != held

    sink = make_sink(services, unique, db, schemas)
    with sink:
        first = plan(sink.previous_state(0) or PlannerState(), events, EXPECTED, waiting)
        assert first.gates == ((held, False), (f"{events[3].topic}[0]@3", True))
        # The first attempt commits its first step (rows, then the DDL), then dies.
        real = sink.rows.write_rows
        calls = []

        def crash_on_second(step: StepWrite) -> None:
            calls.append(step)
            if len(calls) == 2:
                raise RuntimeError("killed")
            real(step)

        monkeypatch.setattr(sink.rows, "write_rows", crash_on_second)
        with pytest.raises(RuntimeError):
            sink.apply(0, first)
        monkeypatch.undo()
    # Meanwhile the lock was released: the live gate now says yes to every DDL.
    again = make_sink(services, lambda _: sink.job, db, schemas)
    with again:
        previous = again.previous_state(0)
        assert previous is not None
        # With the live answers the replay would plan other steps, of which the committed
        # first one would be skipped (and the held rows with it).
        assert plan(previous, events, EXPECTED, lambda _: True).steps != first.steps
        stored = again.stored_gates(0)
        assert stored == first.gates
        replay = plan(previous, events, EXPECTED, stored_gate(stored, lambda _: True))
        assert replay.steps == first.steps
        assert replay.state == first.state
        again.apply(0, replay)
        assert rows_of(services, db, "t") == [(1, "a", None), (3, "c", 1)]
        assert rows_of(services, db, "u") == []  # held with its DDL, for the next batch
        assert replay.state.stash_events == 2
