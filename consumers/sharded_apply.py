"""Shard-DDL coordination for a plain `Subscriber`: its transactions through the gate.

``ShardedApply(coordinator, apply)`` is fed every transaction the subscriber releases
(`handle`) and polled regularly (`poll`). Events of tables that are not shards of a sharded
target go to `apply` as they come. A shard's coordinated DDL is its barrier: the rows before it
are applied, the INTENT is reported, and the shard's later events are held until the lock is
resolved; then they are applied in order (`poll`). `apply` never receives a sharded DDL: the
coordinator executes it once downstream. Other DDL of a shard (CREATE/DROP/TRUNCATE/RENAME
TABLE) is not applied to the target and is logged.

A transaction whose events span a held shard and others is split (`rowbus.merge.hold`, the
rule the apply job's merger follows too): the others are applied, the held shard's part after
the lock (as DM does per table). Splits are counted (`split_transactions`) and the first of
each lock is logged with its position.

Checkpoints: held events are only in memory, so the subscriber must not save a checkpoint past
the first transaction that still has a held event or a pending barrier. `safe_checkpoint()` is
the checkpoint to save (``subscriber.store.save(...)``, instead of `Subscriber.run`'s automatic
commit); after a restart the held part is delivered again, the DDL is reported again (the same
lock) and already applied rows are applied again (idempotent upserts, DM's safe mode).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.hold import hold
from rowbus.merge.spill import DataEvent
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import DdlChange
from rowbus.shard_ddl.coordinator import Coordinator
from rowbus.shard_ddl.ddl import coordinated
from rowbus.shard_ddl.gate import Barrier, ShardGate
from rowbus.shard_ddl.groups import shard_name

log = logging.getLogger(__name__)

Apply = Callable[[Sequence[DataEvent]], None]
"""Applies events (rows, and DDL of unsharded tables) downstream, in order."""

MAX_RELEASE_ROUNDS = 1000


@dataclass(frozen=True, slots=True)
class _Item:
    seq: int
    event: DataEvent


class ShardedApply:
    def __init__(self, coordinator: Coordinator, apply: Apply) -> None:
        self.coordinator = coordinator
        self._apply = apply
        self.gate: ShardGate[_Item] = ShardGate()
        self._txns: deque[tuple[int, Transaction]] = deque()
        self._seq = 0
        self._barriers: dict[str, int] = {}
        """shard → seq of the transaction holding its pending DDL."""
        self._safe: Transaction | None = None
        self.split_transactions = 0
        """Transactions split: part applied, part held behind a shard's DDL lock."""
        self._split_logged: set[str] = set()

    def handle(self, txn: Transaction) -> None:
        """Apply what `txn` may apply now; hold the rest."""
        self._seq += 1
        self._txns.append((self._seq, txn))
        self._note_split(txn)
        out: list[DataEvent] = []
        for event in txn.events:
            shard = self._shard(event)
            if shard is None:
                out.append(event)
                continue
            if isinstance(event, DdlChange) and not coordinated(event.statement):
                log.warning("%s: not applied to its sharded target: %s", shard, event.statement)
                continue
            is_ddl = isinstance(event, DdlChange)
            self._take(self.gate.push(shard, _Item(self._seq, event), ddl=is_ddl), out)
        self._flush(out)

    def _note_split(self, txn: Transaction) -> None:
        waiting = self.gate.waiting()
        if not waiting or txn.is_ddl:
            return
        # None stands for every table that is not a shard (never held)
        decision = hold({self._shard(e) for e in txn.events}, set(waiting))
        if not decision.split:
            return
        self.split_transactions += 1
        for shard in sorted(s for s in decision.stay if s is not None):
            lock = waiting[shard] or shard
            if lock not in self._split_logged:
                self._split_logged.add(lock)
                log.warning(
                    "%s: transaction %s of %s is split: its part on %s waits for shard-DDL "
                    "lock %s, the rest is applied now (the first split for it)",
                    txn.first,
                    txn.id,
                    txn.source,
                    shard,
                    lock,
                )

    def poll(self, timeout: float = 0.0) -> int:
        """Follow the control topic and apply what resolved locks release; how many events."""
        table = self.coordinator.step(timeout)
        applied = 0
        for _ in range(MAX_RELEASE_ROUNDS):
            released = self.gate.release(table)
            if not released:
                break
            out: list[DataEvent] = []
            self._take(released, out)
            applied += len(out)
            self._flush(out)
            table = self.coordinator.table
        return applied

    def _shard(self, event: DataEvent) -> str | None:
        if event.table is None:
            return None
        if self.coordinator.groups.target_of(event.source, event.schema, event.table) is None:
            return None
        return shard_name(event.source, event.schema, event.table)

    def _take(self, items: Sequence[_Item | Barrier[_Item]], out: list[DataEvent]) -> None:
        for item in items:
            if isinstance(item, Barrier):
                self._flush(out)  # every row before the DDL is downstream before it is reported
                ev = item.item.event
                assert isinstance(ev, DdlChange)
                lock = self.coordinator.report_ddl(ev)
                self.gate.block(item.shard, lock)
                self._barriers[item.shard] = item.item.seq
            else:
                out.append(item.event)

    def _flush(self, out: list[DataEvent]) -> None:
        if out:
            self._apply(list(out))
            out.clear()

    def held(self) -> int:
        return sum(1 for _ in self.gate.held())

    def safe_checkpoint(self) -> Checkpoint | None:
        """The checkpoint after the last transaction before anything still held."""
        waiting = self.gate.waiting()
        pending = [seq for shard, seq in self._barriers.items() if shard in waiting]
        pending += [item.seq for _, item in self.gate.held()]
        first_unsafe = min(pending, default=None)
        while self._txns and (first_unsafe is None or self._txns[0][0] < first_unsafe):
            self._safe = self._txns.popleft()[1]
        return None if self._safe is None else self._safe.checkpoint
