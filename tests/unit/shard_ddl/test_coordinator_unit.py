"""The coordinator over an in-memory control log, a fake sink and an injected clock."""

from __future__ import annotations

from typing import Any

import pytest

from rowbus.protocol.events import UNKNOWN, ControlKind, ControlRecord, StatementSession
from rowbus.shard_ddl.coordinator import Coordinator
from rowbus.shard_ddl.exceptions import ControlTopicError, ShardDdlError
from rowbus.shard_ddl.executor import Outcome
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockState
from rowbus.testing import shard_routes


class MemoryLog:
    """A control topic in memory; every reader has its own position."""

    def __init__(self, records: list[ControlRecord]) -> None:
        self.topic = "memory"
        self.records = records
        self.next_offset = 0

    def ensure_topic(self) -> None:
        pass

    def start(self) -> MemoryLog:
        return self

    def close(self) -> None:
        pass

    def publish(self, record: ControlRecord) -> int:
        self.records.append(record)
        return len(self.records) - 1

    def poll(self, timeout: float = 0.0) -> list[ControlRecord]:
        out = self.records[self.next_offset :]
        self.next_offset = len(self.records)
        return out

    def read_to_end(self) -> list[ControlRecord]:
        return self.poll()


class FakeSink:
    def __init__(self) -> None:
        self.executed: list[tuple[str, str]] = []

    def execute(
        self,
        lock_id: str,
        target: str,
        statement: str,
        session: StatementSession = UNKNOWN,
    ) -> Outcome:
        first = all(lock != lock_id for lock, _ in self.executed)
        self.executed.append((lock_id, statement))
        return Outcome(executed=first)

    def column_types(self, target: str) -> dict[str, str]:
        return {"V": "INT"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


GROUPS = ShardGroups.build(
    shard_routes([("up.t_*", "db.t")]), [(s, "up", f"t_{i}") for s in ("a", "b") for i in (1, 2)]
)


def _coordinator(log: list[ControlRecord], sink: Any = None, **kw: Any) -> Coordinator:
    clock = Clock()
    return Coordinator(
        MemoryLog(log),
        actor="job",
        groups=GROUPS,
        executor=sink,
        clock=clock,  # type: ignore[arg-type]
        pause=clock.pause,
        **kw,
    ).start()


def test_all_shards_then_one_execution_and_a_restart_does_not_execute_again() -> None:
    log: list[ControlRecord] = []
    sink = FakeSink()
    job = _coordinator(log, sink)
    for i, (s, t) in enumerate([("a", "t_1"), ("a", "t_2"), ("b", "t_1")]):
        job.report(s, "up", t, f"ALTER TABLE {t} ADD c INT", ts=i + 1)
        job.step()
    assert sink.executed == []
    job.report("b", "up", "t_2", "ALTER TABLE t_2 ADD c INT", ts=9)
    job.step()
    assert sink.executed == [("db.t#1", "ALTER TABLE `db`.`t` ADD c INT")]
    again = _coordinator(log, sink)
    again.step()
    assert again.table.get("db.t#1").state is LockState.DONE  # type: ignore[union-attr]
    assert len(sink.executed) == 1
    assert [r.kind for r in log].count(ControlKind.DONE) == 1


def test_a_non_shard_cannot_report_and_waits_time_out_by_the_injected_clock() -> None:
    job = _coordinator([])
    with pytest.raises(ShardDdlError):
        job.report("a", "other", "x", "ALTER TABLE x ADD c INT", ts=1)
    job.report("a", "up", "t_1", "ALTER TABLE t_1 ADD c INT", ts=1)
    with pytest.raises(ControlTopicError, match="waiting for DONE"):
        job.wait(lambda t: t.get("db.t#1").state is LockState.DONE, 5, "DONE")  # type: ignore[union-attr]


def test_optimistic_reports_use_the_targets_column_types() -> None:
    log: list[ControlRecord] = []
    sink = FakeSink()
    job = _coordinator(log, sink, optimistic=True)
    lock = job.report("a", "up", "t_1", "ALTER TABLE t_1 MODIFY v BIGINT", ts=1)
    job.step()
    assert job.table.get(lock).mode == "optimistic"  # type: ignore[union-attr]
    assert sink.executed == [(lock, "ALTER TABLE `db`.`t` MODIFY v BIGINT")]
    narrow = job.report("a", "up", "t_1", "ALTER TABLE t_1 MODIFY v SMALLINT", ts=2)
    assert job.table.get(narrow).mode == "pessimistic"  # type: ignore[union-attr]
