"""The apply job's end of shard-DDL coordination (`rowbus.shard_ddl`), hooked into the planner.

Per batch, `BatchApplier` calls `before_plan()` (follow the control topic; on the elected
coordinator, execute ready DDL downstream), plans with `ddl_ready` as the planner's DDL gate,
and calls `after_apply()` once the batch is committed in the sink.

`ddl_ready(env)` is True for every DDL that is not a coordinated DDL (ALTER TABLE, CREATE/DROP
INDEX) of a table whose route is ``sharded``. For such a DDL it is True once the shard's lock is
resolved; until then it is False, the planner holds that shard's events in its stash (the other
shards keep flowing) and the DDL is reported (an INTENT) in `after_apply`: only then are all the
shard's rows before the DDL in the sink, so the coordinator may alter the target. The stash is
stored with the batch's checkpoint, so held rows survive a crash; after a restart the batch
re-plans, the same DDL is reported again (same ts: the same lock) and the lock state is rebuilt
from the control topic.

A transaction that spans a waiting shard and other tables is split by the planner
(`rowbus.merge.hold`): its other part is applied now, its part on the shard follows the
DDL; the first split of each lock is logged with its position. `after_apply(plan)` also runs
the wedge report (`consumers.shard_ddl.wedge`): a lock that waits longer than `wedge_report_s`
is logged once as a WARNING and noted on the control topic (`rowbus status` shows it).

The MySQL sink never executes a sharded DDL itself (`MySQLSink` skips it): the coordinator
does, once (`DdlExecutor`). An Iceberg table cannot run the lock's SQL, so with
``apply.sink_kind: iceberg`` the coordinator's executor is `IcebergLockDdl`, which only
records the lock done: each shard's DDL event, released once the lock is done, reaches the
Iceberg sink at its barrier, which evolves the target's tables to the schema that event
carries (`iceberg_sink.IcebergRows.ddl`). The first shard's evolves them in one schema commit;
the others' find nothing to do (the evolution compares schemas); no row of a shard after its
DDL is written before its own DDL step. So the DDL is applied once, after every shard reached
it. Optimistic mode is refused for Iceberg (one line at start): it writes the rows of shards
that have not reached the DDL into a table already evolved, whose layout they do not have.
Lifecycle: no I/O in the constructor; `start()` / `close()`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rowbus.clients import mysql
from rowbus.protocol.events import UNKNOWN, DdlChange, StatementSession
from rowbus.protocol.topics import CONTROL_TOPIC
from rowbus.routing.routes import Router
from rowbus.shard_ddl.control import ControlLog
from rowbus.shard_ddl.coordinator import Coordinator
from rowbus.shard_ddl.ddl import coordinated
from rowbus.shard_ddl.election import Election
from rowbus.shard_ddl.executor import DdlExecutor, Outcome, SinkDdl
from rowbus.shard_ddl.groups import ShardGroups, shard_name
from rowbus.shard_ddl.records import lock_id
from rowbus.shard_ddl.wedge import DEFAULT_WEDGE_REPORT_S, WedgeWatch, where_in
from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import JobConfig

if TYPE_CHECKING:
    from rowbus.spark_apply.planner import Plan

log = logging.getLogger(__name__)


def sharded_groups(router: Router, tables: Iterable[tuple[str, str, str]]) -> ShardGroups:
    """Groups of the upstream `tables` (source, schema, table) whose route is ``sharded``."""

    targets = {router.shard_target(*shard) for shard in tables} - {None}
    return ShardGroups.build(router.shard_target, tables, sharded=[t for t in targets if t])


class IcebergLockDdl:
    """The coordinator's executor for an Iceberg sink (module docstring): a lock's DDL is
    applied by the shards' released DDL steps, so executing it records nothing but the log."""

    def execute(
        self,
        lock_id: str,
        target: str | Sequence[str],
        statement: str,
        session: StatementSession = UNKNOWN,
    ) -> Outcome:
        log.info(
            "lock %s: every shard reached it; the Iceberg tables of %s evolve at the shards' "
            "DDL steps: %s",
            lock_id,
            target,
            statement,
        )
        return Outcome(executed=True)

    def column_types(self, target: str) -> dict[str, str]:
        raise AssertionError("optimistic shard DDL is refused for the Iceberg sink at start")


class ShardDdlHook:
    def __init__(
        self,
        config: JobConfig,
        tables: Iterable[tuple[str, str, str]],
        *,
        control_topic: str = CONTROL_TOPIC,
        election: Election | None = None,
        actor: str | None = None,
        optimistic: bool = False,
        state_database: str = "rowbus_shard_ddl",
        wedge_report_s: float = DEFAULT_WEDGE_REPORT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.router = Router(config.apply.routes, config.apply.unrouted)
        self.groups = sharded_groups(self.router, tables)
        sink = config.sink

        def connect() -> Any:
            return mysql.connect(
                sink,
                autocommit=True,
                connect_timeout=10,
            )

        executor: SinkDdl = DdlExecutor(connect, state_database)
        if config.apply.sink_kind == "iceberg":
            if optimistic:
                raise ApplyError(
                    "apply.shard_ddl.optimistic is not supported with apply.sink_kind iceberg "
                    "(a shard's rows would reach a table evolved past their layout): turn it off"
                )
            executor = IcebergLockDdl()
        self.coordinator = Coordinator(
            ControlLog(config.kafka, control_topic),
            actor=actor or f"{config.apply.job}@{socket.gethostname()}:{os.getpid()}",
            groups=self.groups,
            executor=executor,
            election=election,
            optimistic=optimistic,
            clock=clock,
        )
        self._pending: dict[str, DdlChange] = {}
        self._logged: set[tuple[str, int]] = set()
        self._waits: dict[str, str] = {}
        """shard → the lock its refused DDL waits for (to name a split's lock)."""
        self._split_logged: set[str] = set()
        self.wedge = WedgeWatch(wedge_report_s, clock)

    def start(self) -> ShardDdlHook:
        self.coordinator.start()
        return self

    def close(self) -> None:
        self.coordinator.close()
        self.coordinator.election.close()

    def before_plan(self) -> None:
        self.coordinator.step()

    def ddl_ready(self, env: Envelope) -> bool:
        ev = env.event
        assert isinstance(ev, DdlChange)
        if ev.table is None:
            return True
        target = self.groups.target_of(ev.source, ev.schema, ev.table)
        if target is None or not coordinated(ev.statement):
            return True
        shard = shard_name(ev.source, ev.schema, ev.table)
        table = self.coordinator.table
        lock = table.get(lock_id(target, table.seq_for(target, shard, ev.ts)))
        if lock is not None and lock.intent_of(shard) is not None and lock.released_for(shard):
            return True
        self._waits[shard] = lock_id(target, table.seq_for(target, shard, ev.ts))
        if (shard, ev.ts) not in self._logged:
            self._logged.add((shard, ev.ts))
            log.info("%s: %s waits for its shard-DDL lock: %s", env.position, shard, ev.statement)
        self._pending[shard] = ev
        return False

    def after_apply(self, plan: Plan | None = None) -> None:
        """Report the DDLs that reached their barrier in the batch just committed; log the
        first split of each lock and report locks that wait too long (`plan`: that batch)."""
        for shard, ev in sorted(self._pending.items()):
            lock = self.coordinator.report_ddl(ev)
            log.debug("%s is at lock %s", shard, lock)
        self._pending.clear()
        table = self.coordinator.step()
        if plan is None:
            return
        for split in plan.splits:
            for source, schema, name in split.held:
                waits = self._waits.get(shard_name(source, schema, name or ""))
                if waits is None or waits in self._split_logged:
                    continue
                self._split_logged.add(waits)
                log.warning(
                    "%s (binlog %s): transaction %s of %s is split: its part on %s.%s waits "
                    "for shard-DDL lock %s, the rest is applied now (the first split for it)",
                    split.at,
                    split.position,
                    split.id,
                    source,
                    schema,
                    name,
                    waits,
                )
        for report in self.wedge.observe(table, plan.bound, where_in(plan.state.floors)):
            log.warning("%s", report)
            self.coordinator.note(report.lock_id, str(report), wedge=True)
