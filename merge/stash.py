"""The merger's stash: data events grouped by transaction until the watermark lets them go.

Pure but for the optional spill store. One `Stash` per `rowbus.merge.merger.Merger`; it holds
every taken data event as part of a `Pending` transaction (one `Run` per partition), and keeps:

- a heap of (ts, source, transaction id), so the merger finds what the watermark passed;
- per partition, a heap of the stashed runs' first offsets (where a resume must re-read from);
- the memory bound: past `memory_limit` events in memory, the largest runs spill;
- the remainders of transactions cut by a shard-DDL hold (`cut`, `rowbus.merge.cut`).

Which events are taken (the duplicate and floor rules) and when a transaction is released are
the merger's; the stash only keeps, orders, spills and gives back.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterable, Set
from dataclasses import dataclass, field

from rowbus.merge.checkpoint import TopicPartition
from rowbus.merge.cut import Side, Split, table_of
from rowbus.merge.positions import PosKey, event_key
from rowbus.merge.spill import DataEvent, Spill, SpillStore
from rowbus.merge.state import Envelope, SpilledRun, SpilledTxn, Table
from rowbus.merge.transaction import KafkaPosition, Run
from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd

TxnKey = tuple[str, str]
"""(source, transaction id)."""


def txn_id(event: DataEvent) -> str:
    """The id of the transaction `event` belongs to in the stash."""
    if isinstance(event, DdlChange):
        return ddl_txn_id(event)
    if isinstance(event, SnapshotBegin | SnapshotEnd):
        return marker_txn_id(event)
    return event.txn.id


def ddl_txn_id(event: DdlChange) -> str:
    """A DDL is a transaction of its own (its copies on every partition merge into one). Its
    position names it; several DDLs at one position (a snapshot's CREATEs, PROTOCOL.md §9.5)
    differ by their index."""
    index = event.txn.index if event.txn is not None else 0
    return f"ddl:{event.position}" + (f":{index}" if index else "")


def marker_txn_id(event: SnapshotBegin | SnapshotEnd) -> str:
    """A snapshot marker is a transaction of its own, like a DDL: one whatever the partitions
    it is broadcast to (PROTOCOL.md §9.7); its position and index name it."""
    return f"marker:{event.position}:{event.txn.index}"


@dataclass(slots=True)
class MergerStats:
    """Counters since the merger was built."""

    pushed: int = 0
    duplicates: int = 0
    behind_floor: int = 0
    released_transactions: int = 0
    released_events: int = 0
    spilled_events: int = 0
    peak_in_memory: int = 0
    """The most events held in memory at once (after spilling)."""
    split_transactions: int = 0
    """Transactions cut in two by a shard-DDL hold (`rowbus.merge.hold`)."""


@dataclass(slots=True, eq=False)
class Pending:
    """A stashed transaction: its runs per partition and what the merger orders it by."""

    source: str
    id: str
    ts: int
    count: int | None
    is_ddl: bool
    min_key: PosKey
    max_key: PosKey
    first: KafkaPosition
    last: KafkaPosition
    size: int = 0
    runs: dict[TopicPartition, Run] = field(default_factory=dict)
    tables: set[Table] = field(default_factory=set)
    """The tables its events touch (kept so a hold never reads spilled events back)."""

    @property
    def complete(self) -> bool:
        """All its events are in (or its count is unknown)."""
        return self.count is None or self.size >= self.count


class Stash:
    """Stashed transactions, their order and their memory; see the module docstring.

    `memory_limit`: events kept in memory before the largest runs spill to `spill` (a
    temporary folder when None, deleted by `close`). `stats`: the merger's counters.
    """

    def __init__(self, memory_limit: int | None, spill: Spill | None, stats: MergerStats) -> None:
        self.pending: dict[TxnKey, Pending] = {}
        self._by_ts: list[tuple[int, str, str]] = []
        self._heads: dict[TopicPartition, list[tuple[int, str, str]]] = {}
        self._held_keys: dict[TxnKey, set[PosKey]] = {}
        """The order keys an incomplete transaction holds, once a replay reaches it."""
        self.split: dict[TxnKey, int] = {}
        """Held remainders of split transactions: how many of their events are left (their
        events' `txn.count` names the whole transaction)."""
        self._memory_limit = memory_limit
        self._owns_spill = spill is None and memory_limit is not None
        self.spill: Spill | None = SpillStore() if self._owns_spill else spill
        self._restored: dict[TxnKey, SpilledTxn] = {}
        """The index each restored transaction came from: `entries` gives the same object
        back for one still as it was, so a long hold's index is not held twice (the state
        given and the state left) nor rebuilt per batch."""
        self.in_memory = 0
        self.buffered = 0
        self._stats = stats

    # -- taking ----------------------------------------------------------------------------

    def add(self, tp: TopicPartition, offset: int, event: DataEvent, key: PosKey) -> None:
        """Stash `event`, read at ``tp@offset``, whose order key is `key`."""
        tkey = (event.source, txn_id(event))
        here = KafkaPosition(tp[0], tp[1], offset)
        pending = self.pending.get(tkey)
        if pending is None:
            # a barrier: one event, its broadcast copies count once
            is_ddl = isinstance(event, DdlChange | SnapshotBegin | SnapshotEnd)
            count = 1 if is_ddl else event.txn.count if event.txn is not None else None
            pending = Pending(tkey[0], tkey[1], event.ts, count, is_ddl, key, key, here, here)
            self.pending[tkey] = pending
            heapq.heappush(self._by_ts, (event.ts, *tkey))
        elif pending.is_ddl:
            return  # the same DDL broadcast to another partition
        else:
            if event.ts > pending.ts:
                pending.ts = event.ts
                heapq.heappush(self._by_ts, (event.ts, *tkey))
            if event.txn is not None and event.txn.count is not None and tkey not in self.split:
                pending.count = event.txn.count
            if key < pending.min_key:
                pending.min_key, pending.first = key, here
            if key > pending.max_key:
                pending.max_key, pending.last = key, here
        pending.tables.add(table_of(event))
        keys = self._held_keys.get(tkey)
        if keys is not None:
            keys.add(key)
        run = pending.runs.get(tp)
        if run is None:
            run = pending.runs[tp] = Run(tp[0], tp[1], head=offset)
            heapq.heappush(self._heads.setdefault(tp, []), (offset, *tkey))
        run.offsets.append(offset)
        run.events.append(event)
        run.count += 1
        pending.size += 1
        self.buffered += 1
        self.in_memory += 1
        if self._memory_limit is not None and self.in_memory > self._memory_limit:
            self._spill_largest()
        self._stats.peak_in_memory = max(self._stats.peak_in_memory, self.in_memory)

    def fills_gap(self, event: DataEvent, key: PosKey) -> bool:
        """Whether a replayed event (at or below its lane's last key) is one a held,
        incomplete transaction lacks: a record the broker lost after acknowledging it
        (noida-db on kill -9), published again by a reader restarted from an older
        checkpoint. Dropped as a duplicate, it would hold the transaction, and every later
        one, forever (issue #33)."""
        if isinstance(event, DdlChange):
            return False
        tkey = (event.source, txn_id(event))
        pending = self.pending.get(tkey)
        if pending is None or pending.complete:
            return False
        if tkey in self.split:
            return False
        keys = self._held_keys.get(tkey)
        if keys is None:
            # Built once per incomplete transaction a replay reaches (rare), then kept
            # current by `add`.
            keys = {event_key(e) for r in pending.runs.values() for _, e in r.items(self.spill)}
            self._held_keys[tkey] = keys
        return key not in keys

    def reorder(self, event: DataEvent, tp: TopicPartition) -> None:
        """Put the run a gap-filling `event` joined back in binlog order (it came last)."""
        run = self.pending[(event.source, txn_id(event))].runs[tp]
        items = sorted(run.items(self.spill), key=lambda item: event_key(item[1]))
        if run.chunks:
            assert self.spill is not None
            old = run.chunks
            self.in_memory -= len(run.events)
            run.chunks = [self.spill.write(items)]
            self.spill.release(old)
            run.offsets, run.events = array("q"), []
        else:
            run.offsets, run.events = array("q", (o for o, _ in items)), [e for _, e in items]

    # -- memory ----------------------------------------------------------------------------

    def _spill_largest(self) -> None:
        assert self.spill is not None
        assert self._memory_limit is not None
        runs = sorted(
            (r for p in self.pending.values() for r in p.runs.values() if r.events),
            key=lambda r: len(r.events),
            reverse=True,
        )
        target = self._memory_limit // 2
        for run in runs:
            if self.in_memory <= target:
                break
            self._spill_run(run)

    def _spill_run(self, run: Run) -> None:
        assert self.spill is not None
        n = len(run.events)
        run.chunks.append(self.spill.write(zip(run.offsets, run.events, strict=True)))
        run.offsets = type(run.offsets)("q")
        run.events = []
        self.in_memory -= n
        self._stats.spilled_events += n

    def spill_all(self) -> None:
        """Move every buffered event to the spill store."""
        if self.spill is None:
            raise ValueError("this merger has no spill store")
        for pending in self.pending.values():
            for run in pending.runs.values():
                if run.events:
                    self._spill_run(run)

    def close(self) -> None:
        """Delete the spill folder, if this stash made one."""
        if self._owns_spill and self.spill is not None:
            self.spill.close()

    # -- giving back -----------------------------------------------------------------------

    def due(self, mark: int) -> list[Pending]:
        """The stashed transactions whose ts is at or below `mark`, in release order; each
        leaves the ts heap (`requeue` puts back those not released)."""
        ready: list[Pending] = []
        by_ts = self._by_ts
        while by_ts and by_ts[0][0] <= mark:
            ts, source, tid = heapq.heappop(by_ts)
            pending = self.pending.get((source, tid))
            if pending is not None and pending.ts == ts:
                ready.append(pending)
        ready.sort(key=lambda p: (p.ts, p.source, p.min_key))
        return ready

    def requeue(self, rest: Iterable[Pending]) -> None:
        """Put transactions `due` gave and the merger did not release back in the order."""
        for pending in rest:
            heapq.heappush(self._by_ts, (pending.ts, pending.source, pending.id))

    def take(self, pending: Pending) -> None:
        """`pending` is released: it leaves the stash (unless it is the released part of a
        split one, which was never in it)."""
        tkey = (pending.source, pending.id)
        if self.pending.get(tkey) is pending:
            del self.pending[tkey]
            self.split.pop(tkey, None)
            self._held_keys.pop(tkey, None)
        self.buffered -= pending.size
        self.in_memory -= sum(len(r.events) for r in pending.runs.values())

    def resume_offset(self, tp: TopicPartition, next_offset: int) -> int:
        """Where a resume must re-read `tp` from: its oldest stashed run's first offset, or
        `next_offset` with nothing stashed from it."""
        # An entry stands while its transaction still has a run here starting there: a split
        # moves (or removes) the held remainder's run, and pushes its new head.
        heads = self._heads.get(tp)
        while heads:
            offset, source, tid = heads[0]
            pending = self.pending.get((source, tid))
            run = pending.runs.get(tp) if pending is not None else None
            if run is not None and run.head == offset:
                return offset
            heapq.heappop(heads)
        return next_offset

    def oldest(self) -> Pending | None:
        """The oldest stashed transaction, None with nothing stashed."""
        if not self.pending:
            return None
        return min(self.pending.values(), key=lambda p: (p.ts, p.source, p.min_key))

    # -- the shard-DDL hold's cut ----------------------------------------------------------

    def cut(self, pending: Pending, stay: Set[Table]) -> tuple[Pending, Split]:
        """Split `pending`: it keeps its events on `stay` (stashed; its resume offsets, heads
        and count follow); the part returned holds the others (to release now)."""
        tkey = (pending.source, pending.id)
        go = Side()
        left = Side()
        for tp, run in pending.runs.items():
            if run.chunks:
                # Spilled: each side is written back as a chunk of its own, streaming, so a
                # huge transaction is never read into memory whole.
                assert self.spill is not None
                for side, keep in ((go, False), (left, True)):
                    items = side.watch(tp, run.items(self.spill), stay, keep)
                    chunk = self.spill.write(items)
                    if chunk.count:
                        side.runs[tp] = Run(*tp, chunks=[chunk], count=chunk.count, head=side.head)
                    else:
                        self.spill.release([chunk])
                self.spill.release(run.chunks)
                self.in_memory -= len(run.events)
            else:
                for side, keep in ((go, False), (left, True)):
                    pairs = list(side.watch(tp, run.items(None), stay, keep))
                    if pairs:
                        side.runs[tp] = Run(
                            *tp,
                            offsets=array("q", (o for o, _ in pairs)),
                            events=[e for _, e in pairs],
                            count=len(pairs),
                            head=side.head,
                        )
            for side in (go, left):
                side.head = -1
        lo, hi, first, last = go.bounds()
        released = Pending(
            pending.source, pending.id, pending.ts, go.size, False, lo, hi, first, last
        )
        released.size, released.runs, released.tables = go.size, go.runs, go.tables
        old_heads = {tp: r.head for tp, r in pending.runs.items()}
        pending.min_key, pending.max_key, pending.first, pending.last = left.bounds()
        pending.runs, pending.tables = left.runs, left.tables
        pending.size = pending.count = left.size
        for tp, run in pending.runs.items():
            if old_heads.get(tp) != run.head:
                heapq.heappush(self._heads.setdefault(tp, []), (run.head, *tkey))
        self.split[tkey] = pending.size
        self._stats.split_transactions += 1
        held = tuple(sorted(stay, key=lambda t: (t[0], t[1], t[2] or "")))
        return released, Split(
            pending.source, pending.id, pending.ts, held, pending.first, str(left.position)
        )

    # -- state -----------------------------------------------------------------------------

    def entries(self, keep_spilled: bool) -> tuple[list[Envelope], list[SpilledTxn]]:
        """The stash as entries, spilled events read back, unless `keep_spilled`: then a
        transaction with spilled events is named by its index (`SpilledTxn`) and only its
        events still in memory are entries."""
        stash: list[Envelope] = []
        spilled: list[SpilledTxn] = []
        for pending in self.pending.values():
            if keep_spilled and any(run.chunks for run in pending.runs.values()):
                index = _index(pending)
                was = self._restored.get((pending.source, pending.id))
                spilled.append(was if was == index else index)
                for run in pending.runs.values():
                    stash.extend(
                        Envelope(run.topic, run.partition, o, e)
                        for o, e in zip(run.offsets, run.events, strict=True)
                    )
                continue
            for run in pending.runs.values():
                stash.extend(
                    Envelope(run.topic, run.partition, o, e) for o, e in run.items(self.spill)
                )
        return stash, spilled

    def restore(self, txn: SpilledTxn) -> None:
        """Stash a transaction whose events are in the spill store, from its index."""
        tkey = (txn.source, txn.id)
        self._restored[tkey] = txn
        pending = Pending(
            txn.source,
            txn.id,
            txn.ts,
            txn.count,
            txn.is_ddl,
            txn.min_key,
            txn.max_key,
            KafkaPosition(*txn.first),
            KafkaPosition(*txn.last),
            tables=set(txn.tables),
        )
        self.pending[tkey] = pending
        heapq.heappush(self._by_ts, (txn.ts, *tkey))
        for r in txn.runs:
            tp = (r.topic, r.partition)
            pending.runs[tp] = Run(
                r.topic, r.partition, chunks=list(r.chunks), count=r.count, head=r.head
            )
            pending.size += r.count
            self.buffered += r.count
            heapq.heappush(self._heads.setdefault(tp, []), (r.head, *tkey))

    def restore_split(self, split: dict[TxnKey, int]) -> None:
        """What is left of each split transaction is complete with fewer events than its
        events' `txn.count` says (the rest was released before the state was taken)."""
        for tkey, left in split.items():
            if tkey in self.pending:
                self.pending[tkey].count = left
                self.split[tkey] = left


def _index(p: Pending) -> SpilledTxn:
    return SpilledTxn(
        p.source,
        p.id,
        p.ts,
        p.count,
        p.is_ddl,
        p.min_key,
        p.max_key,
        (p.first.topic, p.first.partition, p.first.offset),
        (p.last.topic, p.last.partition, p.last.offset),
        tuple(sorted(p.tables, key=lambda t: (t[0], t[1], t[2] or ""))),
        tuple(
            SpilledRun(
                r.topic, r.partition, r.head, sum(c.count for c in r.chunks), tuple(r.chunks)
            )
            for r in p.runs.values()
            if r.chunks
        ),
    )
