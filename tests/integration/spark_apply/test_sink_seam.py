"""A kind of sink plugs into the shared step loop through `sinks.SinkKind` alone: a kind that
keeps its rows outside the state database (as the Iceberg sink does), composed with the
ledger on the real sink server, gets each step's rows, DDL and checkpoint exactly once across
a crash between its own commit and the step's checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import DdlChange, Op, SnapshotBegin, SnapshotEnd
from rowbus.routing.routes import Router, RouteSettings, Target
from rowbus.spark_apply.ledger import Ledger
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.sink_conn import retry_conflicts
from rowbus.spark_apply.sinks import Sink, StepWrite
from rowbus.spark_apply.snapshots import SeenSets
from tests.integration.spark_apply.test_sink import EXPECTED, batch, sink_connection
from tests.unit.spark_apply.events import ddl, resolved, row, table


class Crash(Exception):
    """The driver dies after the kind's own commit, before the step's checkpoint."""


class ListRows:
    """A kind of sink whose store is a dict (the stand-in for a store that cannot commit with
    the state database): each step's rows under (batch, step), skipped when already held."""

    def __init__(self, store: dict[tuple[int, int], list[Any]], crash_once: bool) -> None:
        self.store = store
        self.ddls: list[tuple[int, int, str]] = []
        self.done: list[int] = []
        self._crash = crash_once
        self._ledger: Ledger | None = None

    def start(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def close(self) -> None:
        self._ledger = None

    def write_rows(self, step: StepWrite) -> None:
        assert self._ledger is not None
        key = (step.batch_id, step.index)
        if key not in self.store:  # a replay of a step the store holds writes nothing
            self.store[key] = [env.event for env in step.step.rows]
        if self._crash:
            self._crash = False
            raise Crash
        conn = self._ledger.conn
        retry_conflicts(conn, lambda: step.finish(conn, len(self.store[key])), "test step")

    def marker(
        self, cur: Any, marker: SnapshotBegin | SnapshotEnd, target: Target | None
    ) -> Callable[[], None] | None:
        return None

    def ddl(self, env: Envelope, batch_id: int, index: int) -> None:
        assert isinstance(env.event, DdlChange)
        self.ddls.append((batch_id, index, env.event.statement))

    def batch_done(self, batch_id: int) -> None:
        self.done.append(batch_id)


def test_a_kind_of_its_own_gets_each_step_once_across_a_crash(
    services: Settings, unique: Callable[[str], str], make_database: Callable[..., str]
) -> None:
    db = make_database(services.resolved_sink)
    router = Router([RouteSettings(match="up.*", target=f"{db}.{{table}}")], unrouted="error")
    up, up2 = table("up", "t"), table("up", "t", ("id", "v", "w"))
    events = batch(
        row(1, Op.INSERT, after=(1, "a"), tbl=up),
        ddl(2, "ALTER TABLE `up`.`t` ADD COLUMN w INT", up2),
        row(3, Op.INSERT, after=(2, "b", 7), tbl=up2),
        resolved(9),
    )
    job = unique("job")
    store: dict[tuple[int, int], list[Any]] = {}

    def sink(kind: ListRows) -> Sink:
        ledger = Ledger(sink_connection(services), job, f"{db}_state")
        return Sink(ledger, kind, SeenSets(router))

    first = ListRows(store, crash_once=True)
    with sink(first) as s:
        p = plan(s.previous_state(0) or PlannerState(), events, EXPECTED)
        assert len(p.steps) == 2
        with pytest.raises(Crash):
            s.apply(0, p)
        assert s.head() is None  # the kind committed step 0, the ledger did not
    again = ListRows(store, crash_once=False)
    with sink(again) as s:
        previous = s.previous_state(0)
        assert previous == PlannerState()
        assert s.apply(0, plan(previous, events, EXPECTED)) == 2
        assert s.previous_state(0) is None  # committed: a replay is skipped
        assert s.apply(0, p) == 0
        assert again.done == [0, 0]
        head = s.head()
        assert head is not None and (head.batch_id, head.step, head.complete) == (0, 1, True)
        assert [(b, st, sh) for b, st, sh in s.committed_batches()] == [(0, 0, 0), (0, 1, 0)]
    assert sorted(store) == [(0, 0), (0, 1)]
    assert [len(v) for _, v in sorted(store.items())] == [1, 1]
    assert again.ddls == [(0, 0, "ALTER TABLE `up`.`t` ADD COLUMN w INT")]
