"""The watermark merger: Kafka partitions in, whole transactions out, in commit order.

Pure: no I/O except the optional spill folder, time only through the injected `clock`.

Fed ``push(topic, partition, offset, event)`` with every record read, it keeps a watermark per
*lane* — (topic, partition, source) — raised by `Resolved` and `Heartbeat`, and a stash of data
events grouped by transaction. `release()` hands out, in (ts, source, binlog position) order,
every stashed transaction that is complete and whose ts is at or below the minimum watermark
over all expected lanes: by the protocol, no event of any source with such a ts can still come.

Rules applied on `push`:

- an event whose position (binlog file, offset, index in transaction) does not advance past the
  last one seen on its lane is dropped: a duplicate from a restarted reader, or an aborted
  record a broker failed to hide;
- an event at or below its source's `Floor` (already released, or before the start position)
  is dropped;
- a transaction is held until all its rows are in when the row count is known (`TxnRef.count`);
- a DDL is its own transaction; copies of it on several partitions count once. So is a
  snapshot marker (`SnapshotBegin` / `SnapshotEnd`, PROTOCOL.md §9.7): a barrier of its table,
  released in its place in the order (`Transaction.marker`), never asked of a DDL gate.

With a DDL gate (`release(ddl_ready=…)`, shard DDL) a refused DDL holds only its own table
(`rowbus.merge.hold`); a transaction spanning it and other tables is split.

A lane that never reports a watermark (a silent source) stalls the merge: `blocked_by()` says
which lanes hold it back and for how long they have been silent; nothing is ever skipped.

State is a plain value (`snapshot()` → `MergerSnapshot`, `Merger.from_snapshot`) so a batch
planner can replay from it deterministically.
"""

from __future__ import annotations

import heapq
import logging
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from functools import partial
from typing import TypeAlias

from rowbus.merge.checkpoint import Checkpoint, Lane, TopicPartition
from rowbus.merge.hold import hold
from rowbus.merge.positions import Floor, PosKey, event_key
from rowbus.merge.spill import DataEvent, Spill, SpillStore
from rowbus.merge.state import MergerSnapshot, SpilledRun, SpilledTxn
from rowbus.merge.trail import CheckpointTrail, Step
from rowbus.merge.transaction import KafkaPosition, Run, Transaction, TransactionEvents
from rowbus.protocol.events import (
    DdlChange,
    Event,
    Heartbeat,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
)

log = logging.getLogger(__name__)

_TxnKey: TypeAlias = tuple[str, str]
_Table: TypeAlias = tuple[str, str, str | None]
DdlGate: TypeAlias = Callable[[DdlChange, KafkaPosition], bool]
"""Whether a released DDL (read at that position) may go now; see `Merger.release`."""


def _table_of(event: DataEvent) -> _Table:
    return (event.source, event.schema, event.table)


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why the merge waits: a lane whose watermark is behind, or an incomplete transaction."""

    topic: str
    partition: int
    source: str
    watermark: int
    waiting_for: int | None
    silent_s: float
    reason: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] source {self.source}: {self.reason}"


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


@dataclass(frozen=True, slots=True)
class Split:
    """A transaction `release` cut in two: its events on `held` wait (from `at`, its first
    held event, at binlog position `position`); the rest was released."""

    source: str
    id: str
    ts: int
    held: tuple[tuple[str, str, str | None], ...]
    at: KafkaPosition
    position: str


@dataclass(slots=True, eq=False)
class _Pending:
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
    tables: set[_Table] = field(default_factory=set)
    """The tables its events touch (kept so a hold never reads spilled events back)."""


def _txn_id(event: DataEvent) -> str:
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


class Merger:
    """Merges decoded events of many partitions and sources; see the module docstring.

    `expected`: the lanes whose watermarks gate the merge (a source seen on a topic that is not
    expected there is added for every known partition of that topic, with a warning).
    `floors`: per source, what is already behind (from a checkpoint or a start position).
    `start_offsets`: the offset each partition is read from (what a checkpoint names for a
    partition nothing was read from yet); `watermarks`: those a checkpoint carries.
    `memory_limit`: buffered events kept in memory before the largest runs spill to `spill`
    (a temporary folder when None).
    """

    def __init__(
        self,
        expected: Iterable[Lane] = (),
        *,
        floors: Mapping[str, Floor] | None = None,
        start_offsets: Mapping[TopicPartition, int] | None = None,
        watermarks: Mapping[Lane, tuple[int, int]] | None = None,
        memory_limit: int | None = None,
        spill: Spill | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._born = clock()
        self._expected: set[Lane] = set()
        self._topics: dict[str, set[int]] = {}
        self._watermarks: dict[Lane, int] = {}
        self._raised_at: dict[Lane, int] = {}
        self._deferred: dict[TopicPartition, list[tuple[Lane, int, int]]] = {}
        self._advanced_at: dict[Lane, float] = {}
        self._last: dict[Lane, PosKey] = {}
        self._floors: dict[str, Floor] = dict(floors or {})
        self._next_offsets: dict[TopicPartition, int] = dict(start_offsets or {})
        self._pending: dict[_TxnKey, _Pending] = {}
        self._by_ts: list[tuple[int, str, str]] = []
        self._heads: dict[TopicPartition, list[tuple[int, str, str]]] = {}
        self._incomplete: _Pending | None = None
        self._held_keys: dict[_TxnKey, set[PosKey]] = {}
        """The order keys an incomplete transaction holds, once a replay reaches it."""
        self._split: dict[_TxnKey, int] = {}
        """Held remainders of split transactions: how many of their events are left (their
        events' `txn.count` names the whole transaction)."""
        self.splits: list[Split] = []
        """The transactions split since the merger was built, in release order."""
        self._ts = 0
        self._memory_limit = memory_limit
        self._owns_spill = spill is None and memory_limit is not None
        self._spill: Spill | None = SpillStore() if self._owns_spill else spill
        self._in_memory = 0
        self._buffered = 0
        self.stats = MergerStats()
        for tp in self._next_offsets:
            self._topics.setdefault(tp[0], set()).add(tp[1])
        self.expect(expected)
        for lane, (ts, offset) in (watermarks or {}).items():
            tp = (lane[0], lane[1])
            if self._next_offsets.get(tp, 0) > offset:
                self._raise(lane, ts, offset)
            else:
                self._deferred.setdefault(tp, []).append((lane, ts, offset))

    # -- feeding ---------------------------------------------------------------------------

    def expect(self, lanes: Iterable[Lane]) -> None:
        """Add lanes whose watermarks gate the merge."""
        for lane in lanes:
            self._expected.add(lane)
            self._topics.setdefault(lane[0], set()).add(lane[1])

    def push(self, topic: str, partition: int, offset: int, event: Event) -> None:
        """Take one record read from ``topic[partition]@offset``."""
        tp = (topic, partition)
        if offset >= self._next_offsets.get(tp, 0):
            self._next_offsets[tp] = offset + 1
        if self._deferred:
            self._apply_deferred(tp, offset)
        self.stats.pushed += 1
        lane = (topic, partition, event.source)
        if lane not in self._expected:
            self._learn(lane)
        match event:
            case Resolved(ts=ts) | Heartbeat(ts=ts):
                self._raise(lane, ts, offset)
            case RowChange() | DdlChange() | SnapshotBegin() | SnapshotEnd():
                key = event_key(event)
                last = self._last.get(lane)
                refill = False
                if last is None or key > last:
                    self._last[lane] = key
                elif self._fills_gap(event, key):
                    refill = True
                else:
                    self.stats.duplicates += 1
                    log.debug("dropped a duplicate at %s[%s]@%s", topic, partition, offset)
                    return
                floor = self._floors.get(event.source)
                if floor is not None and floor.covers(event, key):
                    self.stats.behind_floor += 1
                    return
                self._stash(tp, offset, event, key)
                if refill:
                    self._reorder(event, tp)

    def _fills_gap(self, event: DataEvent, key: PosKey) -> bool:
        """Whether a replayed event (at or below its lane's last key) is one a held,
        incomplete transaction lacks: a record the broker lost after acknowledging it
        (noida-db on kill -9), published again by a reader restarted from an older
        checkpoint. Dropped as a duplicate, it would hold the transaction, and every later
        one, forever (issue #33)."""
        if isinstance(event, DdlChange):
            return False
        tkey = (event.source, _txn_id(event))
        pending = self._pending.get(tkey)
        if pending is None or pending.count is None or pending.size >= pending.count:
            return False
        if tkey in self._split:
            return False
        keys = self._held_keys.get(tkey)
        if keys is None:
            # Built once per incomplete transaction a replay reaches (rare), then kept
            # current by `_stash`.
            keys = {event_key(e) for r in pending.runs.values() for _, e in r.items(self._spill)}
            self._held_keys[tkey] = keys
        return key not in keys

    def _reorder(self, event: DataEvent, tp: TopicPartition) -> None:
        """Put the run a gap-filling `event` joined back in binlog order (it came last)."""
        run = self._pending[(event.source, _txn_id(event))].runs[tp]
        items = sorted(run.items(self._spill), key=lambda item: event_key(item[1]))
        if run.chunks:
            assert self._spill is not None
            old = run.chunks
            self._in_memory -= len(run.events)
            run.chunks = [self._spill.write(items)]
            self._spill.release(old)
            run.offsets, run.events = array("q"), []
        else:
            run.offsets, run.events = array("q", (o for o, _ in items)), [e for _, e in items]

    def _raise(self, lane: Lane, ts: int, offset: int) -> None:
        if ts > self._watermarks.get(lane, 0):
            self._watermarks[lane] = ts
            self._raised_at[lane] = offset
            self._advanced_at[lane] = self._clock()

    def _apply_deferred(self, tp: TopicPartition, offset: int) -> None:
        # A checkpoint's watermark holds once its partition is re-read past where it was seen:
        # only then is every event it covers back in the stash.
        waiting = self._deferred.get(tp)
        if not waiting:
            return
        still = []
        for lane, ts, seen_at in waiting:
            if offset >= seen_at:
                self._raise(lane, ts, seen_at)
            else:
                still.append((lane, ts, seen_at))
        if still:
            self._deferred[tp] = still
        else:
            del self._deferred[tp]

    def _learn(self, lane: Lane) -> None:
        topic, partition, source = lane
        partitions = self._topics.setdefault(topic, set())
        partitions.add(partition)
        log.warning(
            "source %s was not expected on topic %s; it now gates the merge on partitions %s",
            source,
            topic,
            sorted(partitions),
        )
        self.expect((topic, p, source) for p in sorted(partitions))

    def _stash(self, tp: TopicPartition, offset: int, event: DataEvent, key: PosKey) -> None:
        tkey = (event.source, _txn_id(event))
        here = KafkaPosition(tp[0], tp[1], offset)
        pending = self._pending.get(tkey)
        if pending is None:
            # a barrier: one event, its broadcast copies count once
            is_ddl = isinstance(event, DdlChange | SnapshotBegin | SnapshotEnd)
            count = 1 if is_ddl else event.txn.count if event.txn is not None else None
            pending = _Pending(tkey[0], tkey[1], event.ts, count, is_ddl, key, key, here, here)
            self._pending[tkey] = pending
            heapq.heappush(self._by_ts, (event.ts, *tkey))
        elif pending.is_ddl:
            return  # the same DDL broadcast to another partition
        else:
            if event.ts > pending.ts:
                pending.ts = event.ts
                heapq.heappush(self._by_ts, (event.ts, *tkey))
            if event.txn is not None and event.txn.count is not None and tkey not in self._split:
                pending.count = event.txn.count
            if key < pending.min_key:
                pending.min_key, pending.first = key, here
            if key > pending.max_key:
                pending.max_key, pending.last = key, here
        pending.tables.add(_table_of(event))
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
        self._buffered += 1
        self._in_memory += 1
        if self._memory_limit is not None and self._in_memory > self._memory_limit:
            self._spill_largest()
        self.stats.peak_in_memory = max(self.stats.peak_in_memory, self._in_memory)

    def _spill_largest(self) -> None:
        assert self._spill is not None
        assert self._memory_limit is not None
        runs = sorted(
            (r for p in self._pending.values() for r in p.runs.values() if r.events),
            key=lambda r: len(r.events),
            reverse=True,
        )
        target = self._memory_limit // 2
        for run in runs:
            if self._in_memory <= target:
                break
            self._spill_run(run)

    def _spill_run(self, run: Run) -> None:
        assert self._spill is not None
        n = len(run.events)
        run.chunks.append(self._spill.write(zip(run.offsets, run.events, strict=True)))
        run.offsets = type(run.offsets)("q")
        run.events = []
        self._in_memory -= n
        self.stats.spilled_events += n

    def spill_all(self) -> None:
        """Move every buffered event to the spill store (a planner does so before it takes
        the snapshot it stores: the snapshot then names chunks, not events)."""
        if self._spill is None:
            raise ValueError("this merger has no spill store")
        for pending in self._pending.values():
            for run in pending.runs.values():
                if run.events:
                    self._spill_run(run)

    # -- releasing -------------------------------------------------------------------------

    def lane_watermarks(self) -> dict[Lane, int]:
        """The watermark of every expected lane (0 until one arrives)."""
        return {lane: self._watermarks.get(lane, 0) for lane in self._expected}

    @property
    def watermark(self) -> int:
        """The minimum watermark over the expected lanes (0 while one has none)."""
        if not self._expected:
            return 0
        return min(self._watermarks.get(lane, 0) for lane in self._expected)

    def release(
        self,
        *,
        until_ddl: bool = False,
        limit: int | None = None,
        ddl_ready: DdlGate | None = None,
    ) -> list[Transaction]:
        """The transactions now safe to hand out, in order; each leaves the merger.

        `until_ddl`: stop right after the first DDL, so a DDL always ends a batch.
        `limit`: at most this many transactions.
        `ddl_ready`: a gate for DDLs (a shard DDL waiting for its group). A DDL it refuses stays
        stashed and holds its table — only that table (`rowbus.merge.hold`): a later transaction
        touching only held tables stays stashed behind it, in order; one touching held tables
        and others is split (`Split`, counted in `stats`): its events on the other tables are
        released now as a transaction of their own (same id and ts, in its place in the
        order), its events on the held tables stay stashed and follow the DDL.
        A source's floor moves past held events when a later transaction (or part) of that
        source goes, so a caller that gates DDLs resumes from `snapshot()` (which keeps the held
        events and what is left of each split transaction), not from a `Checkpoint` (the Spark
        planner stores the snapshot with each batch).
        """
        mark = self.watermark
        ready: list[_Pending] = []
        while self._by_ts and self._by_ts[0][0] <= mark:
            ts, source, txn_id = heapq.heappop(self._by_ts)
            pending = self._pending.get((source, txn_id))
            if pending is not None and pending.ts == ts:
                ready.append(pending)
        ready.sort(key=lambda p: (p.ts, p.source, p.min_key))
        out: list[Transaction] = []
        held: list[_Pending] = []
        held_tables: set[_Table] = set()
        self._incomplete = None
        trail = self._trail() if ready else None
        for i, pending in enumerate(ready):
            complete = pending.count is None or pending.size >= pending.count
            if not complete or (limit is not None and len(out) >= limit):
                if not complete:
                    self._incomplete = pending
                self._requeue(ready[i:])
                break
            go: _Pending | None = pending
            if ddl_ready is not None:
                go = self._gate(pending, ddl_ready, held_tables)
                if go is not pending:
                    held.append(pending)  # whole, or what is left of it after a split
                if go is None:
                    continue
            assert trail is not None
            assert go is not None
            out.append(self._finish(go, trail))
            if until_ddl and go.is_ddl:
                self._requeue(ready[i + 1 :])
                break
        self._requeue(held)
        return out

    def _gate(
        self, pending: _Pending, ddl_ready: DdlGate, held_tables: set[_Table]
    ) -> _Pending | None:
        """What of `pending` goes now: all of it, None, or its part off the held tables.

        `held_tables` holds only the tables of refused DDLs (the hold rule, not transitive: a
        transitive hold spreads through shared tables to every shard, issue 28). A
        transaction's tables are kept with it, so a hold reads no event back from the spill
        (only a DDL's own event, to ask the gate, and a split transaction's events)."""
        decision = hold(pending.tables, held_tables)
        if decision.split:
            return self._cut(pending, decision.stay)
        if decision.held:
            return None
        if pending.is_ddl:
            run = next(iter(pending.runs.values()))
            _, event = next(run.items(self._spill))
            if isinstance(event, SnapshotBegin | SnapshotEnd):
                return pending  # a marker waits for no lock (its table's hold keeps it above)
            assert isinstance(event, DdlChange)
            if not ddl_ready(event, pending.first):
                held_tables.add(_table_of(event))
                return None
        return pending

    def _cut(self, pending: _Pending, stay: Set[_Table]) -> _Pending:
        """Split `pending`: it keeps its events on `stay` (stashed; its resume offsets, heads
        and count follow), the part returned holds the others (to release now)."""
        tkey = (pending.source, pending.id)
        go = _Part()
        left = _Part()
        for tp, run in pending.runs.items():
            if run.chunks:
                # Spilled: each side is written back as a chunk of its own, streaming, so a
                # huge transaction is never read into memory whole.
                assert self._spill is not None
                for part, keep in ((go, False), (left, True)):
                    items = part.watch(tp, run.items(self._spill), stay, keep)
                    chunk = self._spill.write(items)
                    if chunk.count:
                        part.runs[tp] = Run(*tp, chunks=[chunk], count=chunk.count, head=part.head)
                    else:
                        self._spill.release([chunk])
                self._spill.release(run.chunks)
                self._in_memory -= len(run.events)
            else:
                for part, keep in ((go, False), (left, True)):
                    pairs = list(part.watch(tp, run.items(None), stay, keep))
                    if pairs:
                        part.runs[tp] = Run(
                            *tp,
                            offsets=array("q", (o for o, _ in pairs)),
                            events=[e for _, e in pairs],
                            count=len(pairs),
                            head=part.head,
                        )
            for part in (go, left):
                part.head = -1
        assert go.first is not None
        assert left.first is not None
        released = go.pending(pending)
        old_heads = {tp: r.head for tp, r in pending.runs.items()}
        left.update(pending)
        for tp, run in pending.runs.items():
            if old_heads.get(tp) != run.head:
                heapq.heappush(self._heads.setdefault(tp, []), (run.head, *tkey))
        self._split[tkey] = pending.size
        self.stats.split_transactions += 1
        self.splits.append(
            Split(
                pending.source,
                pending.id,
                pending.ts,
                tuple(sorted(stay, key=lambda t: (t[0], t[1], t[2] or ""))),
                left.first,
                str(left.position),
            )
        )
        log.debug("%s: transaction %s split around held %s", left.first, pending.id, stay)
        return released

    def _requeue(self, rest: Iterable[_Pending]) -> None:
        for pending in rest:
            heapq.heappush(self._by_ts, (pending.ts, pending.source, pending.id))

    def _trail(self) -> CheckpointTrail:
        return CheckpointTrail(
            {tp: self._resume_offset(tp) for tp in self._next_offsets},
            self._floors,
            self._watermark_claims(),
            self._ts,
        )

    def _watermark_claims(self) -> dict[Lane, tuple[int, int]]:
        # (ts, offset that raised it) per lane; a watermark a resumed checkpoint carries still
        # holds while it waits for its partition to be re-read, so it stays in the checkpoint
        # (which then never moves back).
        claims = {lane: (wm, self._raised_at[lane]) for lane, wm in self._watermarks.items()}
        for waiting in self._deferred.values():
            for lane, ts, seen_at in waiting:
                if ts > claims.get(lane, (0, 0))[0]:
                    claims[lane] = (ts, seen_at)
        return claims

    def _finish(self, pending: _Pending, trail: CheckpointTrail) -> Transaction:
        tkey = (pending.source, pending.id)
        if self._pending.get(tkey) is pending:  # not the released part of a split one
            del self._pending[tkey]
            self._split.pop(tkey, None)
            self._held_keys.pop(tkey, None)
        self._buffered -= pending.size
        runs = list(pending.runs.values())
        self._in_memory -= sum(len(r.events) for r in runs)
        floor = self._floors.get(pending.source, Floor()).raised_to(pending.max_key)
        self._floors[pending.source] = floor
        self._ts = max(self._ts, pending.ts)
        step = trail.add(
            Step(
                {tp: self._resume_offset(tp) for tp in pending.runs},
                pending.source,
                floor,
                pending.ts,
            )
        )
        self.stats.released_transactions += 1
        self.stats.released_events += pending.size
        return Transaction(
            source=pending.source,
            id=pending.id,
            ts=pending.ts,
            events=TransactionEvents(runs, self._spill),
            first=pending.first,
            last=pending.last,
            is_ddl=pending.is_ddl,
            resume=partial(trail.at, step),
        )

    def checkpoint(self) -> Checkpoint:
        """The resume point for what was released so far."""
        return Checkpoint(
            offsets={tp: self._resume_offset(tp) for tp in self._next_offsets},
            floors=dict(self._floors),
            watermarks=self._watermark_claims(),
            ts=self._ts,
        )

    def _resume_offset(self, tp: TopicPartition) -> int:
        # An entry stands while its transaction still has a run here starting there: a split
        # moves (or removes) the held remainder's run, and pushes its new head.
        heads = self._heads.get(tp)
        while heads:
            offset, source, txn_id = heads[0]
            pending = self._pending.get((source, txn_id))
            run = pending.runs.get(tp) if pending is not None else None
            if run is not None and run.head == offset:
                return offset
            heapq.heappop(heads)
        return self._next_offsets[tp]

    # -- explaining ------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Events stashed (in memory or spilled)."""
        return self._buffered

    @property
    def in_memory(self) -> int:
        """Stashed events held in memory."""
        return self._in_memory

    def oldest_held(self) -> str | None:
        """The oldest stashed transaction, for a log line: id, source, ts, where its first
        event was read and its binlog position; None with nothing stashed."""
        if not self._pending:
            return None
        p = min(self._pending.values(), key=lambda p: (p.ts, p.source, p.min_key))
        upstream, _, file, offset, index = p.min_key
        where = f"{file}:{offset}" + (f" (upstream {upstream})" if upstream else "")
        count = "?" if p.count is None else p.count
        return (
            f"transaction {p.id} of source {p.source}, ts {p.ts}, {p.size} of {count} events "
            f"held, first at {p.first} (binlog {where}, index {index})"
        )

    def blocked_by(self, *, timed: bool = True) -> list[Blocker]:
        """Why stashed events wait: the lanes whose watermark is below the oldest stashed
        transaction (or, with nothing stashed, the lowest lanes), and any transaction still
        incomplete although the watermark passed it. `timed`: the reasons say how long each
        lane has been silent (a merger on a constant clock, the Spark planner's, leaves it
        out)."""
        now = self._clock()
        out: list[Blocker] = []
        if self._incomplete is not None and self._incomplete.id in {k[1] for k in self._pending}:
            p = self._incomplete
            out.append(
                Blocker(
                    p.first.topic,
                    p.first.partition,
                    p.source,
                    self.watermark,
                    p.ts,
                    0.0,
                    f"transaction {p.id} (first event at {p.first}) has {p.size} of "
                    f"{p.count} events although the watermark passed its ts {p.ts}",
                )
            )
        oldest = min((p.ts for p in self._pending.values()), default=None)
        mark = self.watermark
        for lane in sorted(self._expected):
            wm = self._watermarks.get(lane, 0)
            if (wm < oldest) if oldest is not None else (wm == mark):
                silent = now - self._advanced_at.get(lane, self._born)
                quiet = f", silent for {silent:.1f}s" if timed else ""
                reason = (
                    f"no watermark yet{quiet}"
                    if wm == 0
                    else f"watermark {wm} is behind ts {oldest}{quiet}"
                    if oldest is not None
                    else f"lowest watermark {wm}{quiet}"
                )
                out.append(Blocker(*lane, wm, oldest, silent, reason))
        return out

    # -- state -----------------------------------------------------------------------------

    def snapshot(self, *, keep_spilled: bool = False) -> MergerSnapshot:
        """The whole state as a plain value; spilled events are read back into it, unless
        `keep_spilled`: then a transaction with spilled events is named by its index
        (`SpilledTxn`, chunks of the spill store, which must outlive the snapshot) and only
        its events still in memory are in the stash."""
        stash: list[tuple[str, int, int, DataEvent]] = []
        spilled: list[SpilledTxn] = []
        for pending in self._pending.values():
            if keep_spilled and any(run.chunks for run in pending.runs.values()):
                spilled.append(_index(pending))
                for run in pending.runs.values():
                    stash.extend(
                        (run.topic, run.partition, o, e)
                        for o, e in zip(run.offsets, run.events, strict=True)
                    )
                continue
            for run in pending.runs.values():
                stash.extend((run.topic, run.partition, o, e) for o, e in run.items(self._spill))
        return MergerSnapshot(
            expected=tuple(sorted(self._expected)),
            watermarks=dict(self._watermarks),
            raised_at=dict(self._raised_at),
            last_positions=dict(self._last),
            floors=dict(self._floors),
            next_offsets=dict(self._next_offsets),
            ts=self._ts,
            stash=tuple(stash),
            spilled=tuple(spilled),
            split=dict(self._split),
        )

    @classmethod
    def from_snapshot(
        cls,
        snapshot: MergerSnapshot,
        *,
        memory_limit: int | None = None,
        spill: Spill | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Merger:
        """A merger in exactly the state `snapshot` was taken in."""
        merger = cls(
            snapshot.expected,
            floors=snapshot.floors,
            start_offsets=snapshot.next_offsets,
            memory_limit=memory_limit,
            spill=spill,
            clock=clock,
        )
        merger._watermarks.update(snapshot.watermarks)
        merger._raised_at.update(snapshot.raised_at)
        merger._ts = snapshot.ts
        if snapshot.spilled and spill is None:
            raise ValueError("a snapshot naming spilled chunks needs their spill store")
        for txn in snapshot.spilled:
            merger._restore(txn)
        for topic, partition, offset, event in snapshot.stash:
            merger._stash((topic, partition), offset, event, event_key(event))
        for tkey, left in snapshot.split.items():
            # what is left of a split transaction is complete with fewer events than its
            # events' `txn.count` says (the rest was released before the snapshot)
            if tkey in merger._pending:
                merger._pending[tkey].count = left
                merger._split[tkey] = left
        merger._last.update(snapshot.last_positions)
        return merger

    def _restore(self, txn: SpilledTxn) -> None:
        tkey = (txn.source, txn.id)
        pending = _Pending(
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
        self._pending[tkey] = pending
        heapq.heappush(self._by_ts, (txn.ts, *tkey))
        for r in txn.runs:
            tp = (r.topic, r.partition)
            pending.runs[tp] = Run(
                r.topic, r.partition, chunks=list(r.chunks), count=r.count, head=r.head
            )
            pending.size += r.count
            self._buffered += r.count
            heapq.heappush(self._heads.setdefault(tp, []), (r.head, *tkey))

    def close(self) -> None:
        """Delete the spill folder, if this merger made one."""
        if self._owns_spill and self._spill is not None:
            self._spill.close()


@dataclass(slots=True)
class _Part:
    """One side of a split transaction, gathered while its events stream past."""

    runs: dict[TopicPartition, Run] = field(default_factory=dict)
    tables: set[_Table] = field(default_factory=set)
    size: int = 0
    head: int = -1
    min_key: PosKey | None = None
    max_key: PosKey | None = None
    first: KafkaPosition | None = None
    last: KafkaPosition | None = None
    position: object = None
    """The binlog position of its first event (for the log)."""

    def watch(
        self,
        tp: TopicPartition,
        items: Iterator[tuple[int, DataEvent]],
        stay: Set[_Table],
        keep: bool,
    ) -> Iterator[tuple[int, DataEvent]]:
        """The items of `items` on this side (on `stay` when `keep`), noted as they pass."""
        for offset, event in items:
            table = _table_of(event)
            if (table in stay) is not keep:
                continue
            key = event_key(event)
            here = KafkaPosition(tp[0], tp[1], offset)
            if self.head < 0:
                self.head = offset
            if self.min_key is None or key < self.min_key:
                self.min_key, self.first, self.position = key, here, event.position
            if self.max_key is None or key > self.max_key:
                self.max_key, self.last = key, here
            self.tables.add(table)
            self.size += 1
            yield offset, event

    def pending(self, whole: _Pending) -> _Pending:
        """This side as a transaction of its own, with `whole`'s id and ts."""
        assert self.min_key is not None
        assert self.max_key is not None
        assert self.first is not None
        assert self.last is not None
        return _Pending(
            whole.source,
            whole.id,
            whole.ts,
            self.size,
            False,
            self.min_key,
            self.max_key,
            self.first,
            self.last,
            self.size,
            self.runs,
            self.tables,
        )

    def update(self, whole: _Pending) -> None:
        """Make `whole` this side (what stays stashed)."""
        assert self.min_key is not None
        assert self.max_key is not None
        assert self.first is not None
        assert self.last is not None
        whole.runs, whole.tables = self.runs, self.tables
        whole.size = whole.count = self.size
        whole.min_key, whole.max_key = self.min_key, self.max_key
        whole.first, whole.last = self.first, self.last


def _index(p: _Pending) -> SpilledTxn:
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
