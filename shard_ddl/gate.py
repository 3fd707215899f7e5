"""The participant's side of a lock: hold a shard's events after its DDL, release them later.

Pure, no I/O. An apply loop pushes every event of a sharded table through `ShardGate.push` and
applies what comes back, in order. When a shard's DDL comes back as a `Barrier`, every row before
it has been handed out: the caller applies those, reports the DDL (an INTENT) and calls `block`
with the lock id. From then on the shard's events queue here while the other shards keep
flowing. `release(table)` hands back, in their original order, the queued events of every shard
whose lock is resolved, up to its next DDL (another `Barrier`) — DM's re-sync, from memory
instead of re-reading the binlog.

Held events are not applied, so a caller that checkpoints must not move its resume point past
the oldest held event (`held`); after a restart the events come again, the DDL is reported again
(the same INTENT: idempotent) and the lock, rebuilt from the control topic, says what to do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from rowbus.shard_ddl.locks import LockTable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Barrier(Generic[T]):
    """`shard`'s DDL `item` reached its barrier: report it, then `block` the shard."""

    shard: str
    item: T


@dataclass(slots=True)
class _Queued(Generic[T]):
    item: T
    ddl: bool


class ShardGate(Generic[T]):
    """Per-shard holding of events behind unresolved DDL locks."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[_Queued[T]]] = {}
        self._blocked: dict[str, str | None] = {}
        """shard → the lock it waits for (None: its barrier was handed out, not yet blocked)."""

    def push(self, shard: str, item: T, *, ddl: bool = False) -> list[T | Barrier[T]]:
        """What to do with `item` now: ``[item]``, ``[Barrier]`` for a DDL, or ``[]`` (held)."""
        if shard in self._blocked:
            self._queues.setdefault(shard, deque()).append(_Queued(item, ddl))
            return []
        if ddl:
            self._blocked[shard] = None
            return [Barrier(shard, item)]
        return [item]

    def block(self, shard: str, lock_id: str) -> None:
        """`shard` waits for `lock_id` (after its Barrier was reported)."""
        self._blocked[shard] = lock_id

    def waiting(self) -> dict[str, str | None]:
        """shard → the lock it waits for."""
        return dict(self._blocked)

    def held(self) -> Iterator[tuple[str, T]]:
        """Every held event (not the barriers' DDLs), shard by shard, in order."""
        for shard, queue in self._queues.items():
            for q in queue:
                yield shard, q.item

    def release(self, table: LockTable) -> list[T | Barrier[T]]:
        """The events of every shard whose lock is resolved in `table`, in order per shard."""
        out: list[T | Barrier[T]] = []
        for shard, lock_id in sorted(self._blocked.items()):
            if lock_id is None:
                continue
            lock = table.get(lock_id)
            if lock is None or not lock.released_for(shard):
                continue
            del self._blocked[shard]
            queue = self._queues.get(shard, deque())
            while queue:
                q = queue.popleft()
                if q.ddl:
                    self._blocked[shard] = None
                    out.append(Barrier(shard, q.item))
                    break
                out.append(q.item)
            if not queue:
                self._queues.pop(shard, None)
        return out
