"""One apply job's end of shard-DDL coordination: report intents, follow locks, and — when this
job is the elected coordinator — execute ready DDL downstream and publish DONE.

Lifecycle: the constructor does no I/O. `start()` opens the control log (creating the topic if
missing) and rebuilds the lock table by reading the topic to its end; `step()` follows the topic
and, on the coordinator, executes what is ready; `close()` releases the clients (the election is
the caller's: it may be shared).

Every change of state comes from the topic: `report` publishes and then reads the topic up to
its own record, so `table` is always exactly the replay of the topic so far.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rowbus.protocol.events import UNKNOWN, ControlKind, ControlRecord, DdlChange, StatementSession
from rowbus.shard_ddl import records
from rowbus.shard_ddl.control import ControlLog
from rowbus.shard_ddl.ddl import compatible, normalize, retarget
from rowbus.shard_ddl.election import Election, SoleCoordinator
from rowbus.shard_ddl.exceptions import ControlTopicError, ShardDdlError
from rowbus.shard_ddl.executor import SinkDdl
from rowbus.shard_ddl.groups import ShardGroups, shard_name
from rowbus.shard_ddl.locks import (
    OPTIMISTIC,
    PESSIMISTIC,
    Lock,
    LockState,
    LockTable,
    replay,
)

log = logging.getLogger(__name__)


class Coordinator:
    def __init__(
        self,
        control: ControlLog,
        *,
        actor: str,
        groups: ShardGroups,
        executor: SinkDdl | None = None,
        election: Election | None = None,
        optimistic: bool = False,
        clock: Callable[[], float] = time.time,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.control = control
        self.actor = actor
        self.groups = groups
        self.executor = executor
        self.election: Election = election or SoleCoordinator()
        self.optimistic = optimistic
        self._clock = clock
        self._pause = pause
        self.table = LockTable()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def start(self) -> Coordinator:
        self.control.ensure_topic()
        self.control.start()
        self.table = replay(self.control.read_to_end())
        log.info(
            "%s: rebuilt %d lock(s) from %s (%d unresolved)",
            self.actor,
            len(self.table.locks),
            self.control.topic,
            len(self.table.unresolved()),
        )
        return self

    def close(self) -> None:
        self.control.close()

    # --- participant -------------------------------------------------------------------------

    def report_ddl(self, ev: DdlChange) -> str:
        """`report` of a shard's DDL event, with everything it carries."""
        if ev.table is None:
            raise ShardDdlError(f"{ev.position}: a DDL without a table is no shard DDL")
        return self.report(
            ev.source,
            ev.schema,
            ev.table,
            ev.statement,
            ev.ts,
            position=str(ev.position),
            session=ev.session,
        )

    def report(
        self,
        source: str,
        schema: str,
        table: str,
        statement: str,
        ts: int,
        *,
        position: str = "",
        session: StatementSession = UNKNOWN,
    ) -> str:
        """Report that shard `source/schema.table` reached its DDL `statement` (upstream `ts`),
        run under the source's `session` (the DDL event's, PROTOCOL.md §1.3); the lock id.
        Reporting the same DDL again (same ts) returns the same lock."""
        shard = shard_name(source, schema, table)
        target = self.groups.target_of(source, schema, table)
        if target is None:
            raise ShardDdlError(f"{shard} is not a shard of any sharded target")
        seq = self.table.seq_for(target, shard, ts)
        lock_id = records.lock_id(target, seq)
        existing = self.table.get(lock_id)
        if existing is not None and existing.intent_of(shard) is not None:
            return lock_id
        t_schema, _, t_table = target.partition(".")
        executable = retarget(statement, t_schema, t_table)
        normalized = normalize(executable)
        mode = PESSIMISTIC
        if self.optimistic:
            types = self.executor.column_types(target) if self.executor is not None else None
            if compatible(normalized, types):
                mode = OPTIMISTIC
        record = records.intent(
            target=target,
            seq=seq,
            shard=shard,
            statement=statement,
            executable=executable,
            normalized=normalized,
            ts=ts,
            group=self.groups.group(target),
            mode=mode,
            actor=self.actor,
            at_ms=self._now_ms(),
            position=position,
            session=session,
        )
        self._publish(record)
        log.info("%s: %s reported %r to lock %s (%s)", self.actor, shard, statement, lock_id, mode)
        return lock_id

    def note(self, lock_id: str, note: str, *, wedge: bool = False) -> None:
        """Publish an OPERATOR_NOTE on `lock_id` (`wedge`: a wedge report, kept as the lock's
        `stuck` until it resolves, so `rowbus status` shows it)."""
        self._publish(
            records.action(
                ControlKind.OPERATOR_NOTE,
                lock_id,
                actor=self.actor,
                at_ms=self._now_ms(),
                note=note,
                wedge=wedge,
            )
        )

    def released(self, lock_id: str, shard: str) -> bool:
        lock = self.table.get(lock_id)
        return lock is not None and lock.released_for(shard)

    # --- following and executing -------------------------------------------------------------

    def step(self, timeout: float = 0.0) -> LockTable:
        """Apply what arrived on the topic; on the coordinator, execute what is ready."""
        self._apply(self.control.poll(timeout))
        if self.executor is not None and self.election.is_leader():
            for lock in self.table:
                if lock.state is LockState.CONFLICT and not _has(lock, "conflict"):
                    self._publish(
                        records.action(
                            ControlKind.CONFLICT,
                            lock.lock_id,
                            actor=self.actor,
                            at_ms=self._now_ms(),
                            cause=lock.cause,
                        )
                    )
            for lock in self.table.executable():
                self._execute(lock)
        return self.table

    def _execute(self, lock: Lock) -> None:
        assert self.executor is not None
        assert lock.statement is not None
        outcome = self.executor.execute(lock.lock_id, lock.target, lock.statement, lock.session)
        self._publish(
            records.action(
                ControlKind.DONE,
                lock.lock_id,
                actor=self.actor,
                at_ms=self._now_ms(),
                statement=lock.statement,
                already=not outcome.executed,
            )
        )

    def wait(self, condition: Callable[[LockTable], bool], timeout: float, what: str) -> LockTable:
        """Step until `condition(table)` holds; ControlTopicError after `timeout` seconds."""
        deadline = self._clock() + timeout
        while True:
            table = self.step(0.1)
            if condition(table):
                return table
            if self._clock() >= deadline:
                raise ControlTopicError(
                    f"timed out after {timeout:.1f}s waiting for {what}", retryable=True
                )
            self._pause(0.01)

    def _publish(self, record: ControlRecord) -> None:
        offset = self.control.publish(record)
        deadline = self._clock() + 15.0
        while self.control.next_offset <= offset:
            if self._clock() >= deadline:
                raise ControlTopicError(
                    f"{record.kind.value} of {record.lock_id} was written at offset {offset} "
                    f"but not read back",
                    retryable=True,
                )
            self._apply(self.control.poll(0.2))

    def _apply(self, got: list[ControlRecord]) -> None:
        for record in got:
            self.table = self.table.apply(record)


def _has(lock: Lock, kind: str) -> bool:
    return any(e.kind == kind for e in lock.history)
