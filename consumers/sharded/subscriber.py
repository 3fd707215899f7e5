"""Sharded consumption (Ptubes' SDK): rows split into N shards by a shard field, one worker
thread per shard, a storage point per shard in ZooKeeper, shards spread over processes.

Lifecycle: the constructor does no I/O. `start()` joins the group (`Membership`); `run()`
loops: on a membership change it rebalances, otherwise it polls the `Subscriber` and hands
each released transaction's rows to the workers of the shards they hash to (`ShardKey`; a DDL
goes to every shard held, as a barrier). After each polled batch every worker gets the batch's
checkpoint and saves it as its storage point once it has handled everything before it.
`close()` drains the workers, saves their points, releases the shards and leaves.

Rebalancing: shard → process is `assign(sorted members)`. A process stops the shards it
loses (drains, saves the point, deletes its owner node), takes the ones it gains once their
owner nodes are free, and restarts its Subscriber from `combine(points of its shards)`; each
shard then skips what is at or below its own point (`already_handled`).

Guarantee, per shard: order kept (one thread, binlog order per source, ts order across);
at least once from the shard's storage point. A shard moved between live processes is handed
over after its point is saved: nothing is delivered twice. A process that dies loses its
shards when its ZooKeeper session expires; what it handled after its last points is
delivered again by the new owner. A transaction's rows in different shards are handled
independently (no atomicity across shards), as in Ptubes.

Start: a process whose shards have no storage point reads from `start`; when some have one and
some not, it also reads from `start` (`earliest` loses nothing; a later start means the shards
with older points skip what lies before it).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from rowbus.clients.settings import ZooKeeperAuth
from rowbus.consumers.exceptions import CheckpointError, ShardingError
from rowbus.consumers.sharded.assignment import ShardKey, already_handled, combine, rebalance
from rowbus.consumers.sharded.membership import Membership
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.stores.zookeeper import ZooKeeperStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.spill import DataEvent
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardTransaction:
    """The part of one upstream transaction that falls in `shard`, in transaction order."""

    shard: int
    source: str
    id: str
    ts: int
    events: tuple[DataEvent, ...]


_Item = ShardTransaction | Checkpoint | None  # None: stop


class _Worker(threading.Thread):
    """Handles one shard's items in order; saves marks as the shard's storage point."""

    def __init__(
        self, shard: int, handler: Callable[[ShardTransaction], None], store: ZooKeeperStore
    ) -> None:
        super().__init__(name=f"shard-{shard}", daemon=True)
        self.shard = shard
        self.queue: queue.Queue[_Item] = queue.Queue(maxsize=10_000)
        self._handler = handler
        self._store = store
        self.point = store.load()
        self.error: BaseException | None = None

    def run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                if self.error is None:
                    self._handle(item)
            except BaseException as exc:  # reported by the main loop
                self.error = exc
                log.exception("shard %s failed", self.shard)
            finally:
                self.queue.task_done()

    def _handle(self, item: ShardTransaction | Checkpoint) -> None:
        if isinstance(item, ShardTransaction):
            self._handler(item)
            return
        try:
            item.check_follows(self.point)
        except CheckpointError:
            return  # the restarted read has not caught up with this shard's point yet
        self._store.save(item)
        self.point = item

    def drain(self) -> None:
        """Wait until everything queued is handled (and its point saved)."""
        self.queue.join()

    def stop(self) -> None:
        self.queue.put(None)
        self.join()


class ShardedSubscriber:
    """See the module docstring. `handler` runs on the shard's worker thread.

    `shards`: the shard count of the group (the same in every process). `shard_columns`:
    ``{"schema.table" pattern: [columns]}`` (default: the primary key). `member`: this
    process's id in the group (default host-pid). `subscriber_options` go to each `Subscriber`
    (sources, topic_template, checkpoints_topic, schemas_topic, start, group_id, …).
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topics: Sequence[str],
        handler: Callable[[ShardTransaction], None],
        *,
        zookeeper_hosts: str,
        group: str,
        shards: int = 8,
        shard_columns: Mapping[str, Sequence[str]] | None = None,
        member: str | None = None,
        zookeeper_root: str = "/rowbus",
        session_timeout_s: float = 6.0,
        zookeeper_auth: ZooKeeperAuth | None = None,
        **subscriber_options: Any,
    ) -> None:
        self._kafka_config = dict(kafka_config)
        self.topics = tuple(topics)
        self._handler = handler
        self.key = ShardKey(shards, shard_columns)
        self.member = member or f"{socket.gethostname()}-{os.getpid()}"
        self._membership = Membership(
            zookeeper_hosts,
            group,
            self.member,
            shards,
            root=zookeeper_root,
            session_timeout_s=session_timeout_s,
            auth=zookeeper_auth,
        )
        self._options = subscriber_options
        self._workers: dict[int, _Worker] = {}
        self._wanted: set[int] = set()
        self._filters: dict[int, Checkpoint | None] = {}
        self._sub: Subscriber | None = None
        self.rebalances = 0

    @property
    def held(self) -> frozenset[int]:
        """The shards this process handles now."""
        return frozenset(self._workers)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._membership.open()

    def close(self) -> None:
        """Drain and checkpoint every shard, release them, leave the group."""
        try:
            self._close_subscriber()
            self._stop_shards(set(self._workers))
        finally:
            self._membership.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the loop --------------------------------------------------------------------------

    def run(self, *, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Poll, dispatch and rebalance until `should_stop()`."""
        while not should_stop():
            self.step()

    def step(self, poll_timeout: float = 0.2) -> int:
        """One turn: rebalance if needed, then poll once; returns the transactions released."""
        self._check_workers()
        if self._membership.changed.is_set() or self._wanted:
            self._rebalance()
        if self._sub is None:
            self._membership.changed.wait(poll_timeout)
            return 0
        batch = self._sub.poll(poll_timeout)
        self._dispatch(batch)
        return len(batch)

    def _check_workers(self) -> None:
        for worker in self._workers.values():
            if worker.error is not None:
                raise ShardingError(
                    f"the handler of shard {worker.shard} failed: {worker.error!r}"
                ) from worker.error

    def _rebalance(self) -> None:
        self._membership.changed.clear()
        members = self._membership.members()
        plan = rebalance(self._workers, members, self.member, self.key.shards)
        target = plan.keep | plan.start
        if plan.stop:
            log.info("%s stops shards %s", self.member, sorted(plan.stop))
            self._close_subscriber()
            self._stop_shards(set(plan.stop))
        gained = {s for s in sorted(target - self.held) if self._membership.acquire(s)}
        self._wanted = set(target - self.held - gained)
        if self._wanted:
            log.info("%s waits for shards %s to be released", self.member, sorted(self._wanted))
        if not (plan.stop or gained):
            return
        self.rebalances += 1
        self._close_subscriber()
        for shard in sorted(gained):
            worker = _Worker(shard, self._handler, self._membership.store(shard))
            worker.start()
            self._workers[shard] = worker
        log.info("%s handles shards %s (members %s)", self.member, sorted(self.held), members)
        if self._workers:
            self._open_subscriber()

    def _stop_shards(self, shards: set[int]) -> None:
        for shard in sorted(shards):
            worker = self._workers.pop(shard)
            worker.stop()
            self._membership.release(shard)

    def _close_subscriber(self) -> None:
        if self._sub is not None:
            for worker in self._workers.values():
                worker.drain()
            self._sub.close()
            self._sub = None

    def _open_subscriber(self) -> None:
        points = {s: w.point for s, w in self._workers.items()}
        known = [p for p in points.values() if p is not None]
        start = combine(known) if len(known) == len(points) else None
        store = MemoryCheckpointStore()
        if start is not None:
            store.save(start)
        self._filters = dict(points)
        sub = Subscriber(self._kafka_config, self.topics, store=store, **self._options)
        sub.start()
        self._sub = sub

    def _dispatch(self, batch: Sequence[Transaction]) -> None:
        assert self._sub is not None
        held = self._workers
        for txn in batch:
            events = list(txn.events)
            last = events[-1]
            parts: dict[int, list[DataEvent]] = {}
            if isinstance(last, DdlChange | SnapshotBegin | SnapshotEnd) and len(events) == 1:
                parts = {s: [last] for s in held}  # a barrier (a DDL, a snapshot marker): all
            else:
                for event in events:
                    assert isinstance(event, RowChange)
                    for shard, part_event in self.key.route(event, self._sub.table(event)):
                        if shard in held:
                            parts.setdefault(shard, []).append(part_event)
            for shard, part in parts.items():
                if already_handled(self._filters.get(shard), last):
                    continue
                held[shard].queue.put(
                    ShardTransaction(shard, txn.source, txn.id, txn.ts, tuple(part))
                )
        if batch:
            mark = batch[-1].checkpoint
            for worker in held.values():
                worker.queue.put(mark)
