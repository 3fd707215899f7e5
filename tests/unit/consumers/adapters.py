"""The two adapters over the one merge engine, behind one face for the reference tests.

`SubscriberAdapter` drives a `Merger` the way the `Subscriber` does (push each record, release
now and then); `PlannerAdapter` drives the Spark job's planner (`spark_apply.planner.plan`) the
way a micro-batch does: the records pushed since the last release are one batch, planned over
the state stored by the batch before (round-tripped through its stored form), and every batch
is planned twice to check that a re-run plans exactly the same thing. Both hand out whole
transactions as ``(source, id, ts, events)``.
"""

from __future__ import annotations

from typing import Protocol

from rowbus.merge.checkpoint import Lane
from rowbus.merge.merger import Merger, ddl_txn_id, marker_txn_id
from rowbus.merge.spill import DataEvent
from rowbus.merge.state import MergerState
from rowbus.protocol.events import DdlChange, Event, SnapshotBegin, SnapshotEnd
from rowbus.spark_apply.planner import Envelope, PlannerState, plan

Released = tuple[str, str, int, list[DataEvent]]


class Adapter(Protocol):
    def push(self, topic: str, partition: int, offset: int, event: Event) -> None: ...

    def release(self, until_ddl: bool = False) -> list[Released]: ...

    def restarted(self) -> Adapter:
        """A new adapter built from this one's stored state (a restart)."""
        ...

    def close(self) -> None: ...


class SubscriberAdapter:
    def __init__(self, lanes: list[Lane], memory_limit: int | None = None) -> None:
        self.merger = Merger(lanes, memory_limit=memory_limit)

    def push(self, topic: str, partition: int, offset: int, event: Event) -> None:
        self.merger.push(topic, partition, offset, event)

    def release(self, until_ddl: bool = False) -> list[Released]:
        return [
            (t.source, t.id, t.ts, list(t.events)) for t in self.merger.release(until_ddl=until_ddl)
        ]

    def restarted(self) -> SubscriberAdapter:
        state = MergerState.from_json(self.merger.state().to_json())
        again = SubscriberAdapter([])
        again.merger = Merger.from_state(state)
        return again

    def close(self) -> None:
        self.merger.close()


class PlannerAdapter:
    def __init__(self, lanes: list[Lane], memory_limit: int | None = None) -> None:
        del memory_limit  # the planner's merger lives for one batch
        self.lanes = lanes
        self.state = PlannerState()
        self.batch: list[Envelope] = []

    def push(self, topic: str, partition: int, offset: int, event: Event) -> None:
        self.batch.append(Envelope(topic, partition, offset, event))

    def release(self, until_ddl: bool = False) -> list[Released]:
        del until_ddl  # a batch always releases all it can, cut into steps at DDL
        p = plan(self.state, self.batch, self.lanes)
        again = plan(PlannerState.from_bytes(self.state.to_bytes()), self.batch, self.lanes)
        assert again == p, "a re-run batch planned something else"
        self.state = PlannerState.from_bytes(p.state.to_bytes())
        self.batch = []
        out: list[Released] = []
        for step in p.steps:
            for env in step.rows:
                ev = env.event
                assert not isinstance(ev, DdlChange) and ev.txn is not None  # type: ignore[union-attr]
                txn = ev.txn  # type: ignore[union-attr]
                if out and out[-1][:2] == (ev.source, txn.id):
                    out[-1][3].append(ev)  # type: ignore[arg-type]
                else:
                    out.append((ev.source, txn.id, ev.ts, [ev]))  # type: ignore[list-item]
            if step.ddl is not None:
                barrier = step.ddl.event
                if isinstance(barrier, SnapshotBegin | SnapshotEnd):  # a marker ends a step too
                    out.append((barrier.source, marker_txn_id(barrier), barrier.ts, [barrier]))
                    continue
                assert isinstance(barrier, DdlChange)
                out.append((barrier.source, ddl_txn_id(barrier), barrier.ts, [barrier]))
        return out

    def restarted(self) -> PlannerAdapter:
        again = PlannerAdapter(self.lanes)
        again.state = PlannerState.from_bytes(self.state.to_bytes())
        again.batch = list(self.batch)  # records read but not planned: Spark re-reads them
        return again

    def close(self) -> None:
        pass


ADAPTERS = {"subscriber": SubscriberAdapter, "planner": PlannerAdapter}
