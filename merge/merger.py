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

State is a plain value (`state()` → `MergerState`, `Merger.from_state`) so a batch
planner can replay from it deterministically.

The merger applies the rules and releases; it keeps its state in two parts: `Lanes`
(`rowbus.merge.lanes`: watermarks, last positions, floors, offsets) and `Stash`
(`rowbus.merge.stash`: the held transactions, their order and memory, the hold's cut).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TypeAlias, TypeVar, overload

from rowbus.merge.checkpoint import Checkpoint, Lane, TopicPartition
from rowbus.merge.cut import Split, table_of
from rowbus.merge.hold import hold
from rowbus.merge.lanes import Blocker, Lanes
from rowbus.merge.positions import Floor, event_key
from rowbus.merge.spill import DataEvent, Spill
from rowbus.merge.stash import MergerStats, Pending, Stash, ddl_txn_id, marker_txn_id
from rowbus.merge.state import MergerState, Table
from rowbus.merge.trail import CheckpointTrail, Step
from rowbus.merge.transaction import KafkaPosition, Transaction, TransactionEvents
from rowbus.protocol.events import (
    DdlChange,
    Event,
    Heartbeat,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
)

__all__ = [
    "Blocker",
    "DdlGate",
    "Merger",
    "MergerStats",
    "Split",
    "ddl_txn_id",
    "marker_txn_id",
]

log = logging.getLogger(__name__)

S = TypeVar("S", bound=MergerState)

DdlGate: TypeAlias = Callable[[DdlChange, KafkaPosition], bool]
"""Whether a released DDL (read at that position) may go now; see `Merger.release`."""


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
        self.stats = MergerStats()
        self._lanes = Lanes(
            clock, floors=floors, start_offsets=start_offsets, watermarks=watermarks
        )
        self._lanes.expect(expected)
        self._stash = Stash(memory_limit, spill, self.stats)
        self._incomplete: Pending | None = None
        self.splits: list[Split] = []
        """The transactions split since the merger was built, in release order."""
        self._ts = 0

    # -- feeding ---------------------------------------------------------------------------

    def expect(self, lanes: Iterable[Lane]) -> None:
        """Add lanes whose watermarks gate the merge."""
        self._lanes.expect(lanes)

    def push(self, topic: str, partition: int, offset: int, event: Event) -> None:
        """Take one record read from ``topic[partition]@offset``."""
        lanes = self._lanes
        tp = (topic, partition)
        if offset >= lanes.next_offsets.get(tp, 0):
            lanes.next_offsets[tp] = offset + 1
        if lanes.deferred:
            lanes.apply_deferred(tp, offset)
        self.stats.pushed += 1
        lane = (topic, partition, event.source)
        if lane not in lanes.expected:
            lanes.learn(lane)
        match event:
            case Resolved(ts=ts) | Heartbeat(ts=ts):
                lanes.raise_mark(lane, ts, offset)
            case RowChange() | DdlChange() | SnapshotBegin() | SnapshotEnd():
                key = event_key(event)
                last = lanes.last.get(lane)
                refill = False
                if last is None or key > last:
                    lanes.last[lane] = key
                elif self._stash.fills_gap(event, key):
                    refill = True
                else:
                    self.stats.duplicates += 1
                    log.debug("dropped a duplicate at %s[%s]@%s", topic, partition, offset)
                    return
                floor = lanes.floors.get(event.source)
                if floor is not None and floor.covers(event, key):
                    self.stats.behind_floor += 1
                    return
                self._stash.add(tp, offset, event, key)
                if refill:
                    self._stash.reorder(event, tp)

    def spill_all(self) -> None:
        """Move every buffered event to the spill store (a planner does so before it takes
        the state it stores: the state then names chunks, not events)."""
        self._stash.spill_all()

    # -- releasing -------------------------------------------------------------------------

    def lane_watermarks(self) -> dict[Lane, int]:
        """The watermark of every expected lane (0 until one arrives)."""
        return self._lanes.lane_watermarks()

    @property
    def watermark(self) -> int:
        """The minimum watermark over the expected lanes (0 while one has none)."""
        return self._lanes.watermark

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
        source goes, so a caller that gates DDLs resumes from `state()` (which keeps the held
        events and what is left of each split transaction), not from a `Checkpoint` (the Spark
        planner stores the state with each batch).
        """
        stash = self._stash
        ready = stash.due(self._lanes.watermark)
        out: list[Transaction] = []
        held: list[Pending] = []
        held_tables: set[Table] = set()
        self._incomplete = None
        trail = self._trail() if ready else None
        for i, pending in enumerate(ready):
            complete = pending.complete
            if not complete or (limit is not None and len(out) >= limit):
                if not complete:
                    self._incomplete = pending
                stash.requeue(ready[i:])
                break
            go: Pending | None = pending
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
                stash.requeue(ready[i + 1 :])
                break
        stash.requeue(held)
        return out

    def _gate(
        self, pending: Pending, ddl_ready: DdlGate, held_tables: set[Table]
    ) -> Pending | None:
        """What of `pending` goes now: all of it, None, or its part off the held tables.

        `held_tables` holds only the tables of refused DDLs (the hold rule, not transitive: a
        transitive hold spreads through shared tables to every shard, issue 28). A
        transaction's tables are kept with it, so a hold reads no event back from the spill
        (only a DDL's own event, to ask the gate, and a split transaction's events)."""
        decision = hold(pending.tables, held_tables)
        if decision.split:
            released, split = self._stash.cut(pending, decision.stay)
            self.splits.append(split)
            log.debug("%s: transaction %s split around held %s", split.at, pending.id, split.held)
            return released
        if decision.held:
            return None
        if pending.is_ddl:
            run = next(iter(pending.runs.values()))
            _, event = next(run.items(self._stash.spill))
            if isinstance(event, SnapshotBegin | SnapshotEnd):
                return pending  # a marker waits for no lock (its table's hold keeps it above)
            assert isinstance(event, DdlChange)
            if not ddl_ready(event, pending.first):
                held_tables.add(table_of(event))
                return None
        return pending

    def _trail(self) -> CheckpointTrail:
        lanes = self._lanes
        return CheckpointTrail(
            {tp: self._stash.resume_offset(tp, o) for tp, o in lanes.next_offsets.items()},
            lanes.floors,
            lanes.claims(),
            self._ts,
        )

    def _finish(self, pending: Pending, trail: CheckpointTrail) -> Transaction:
        stash = self._stash
        floors = self._lanes.floors
        next_offsets = self._lanes.next_offsets
        stash.take(pending)
        floor = floors.get(pending.source, Floor()).raised_to(pending.max_key)
        floors[pending.source] = floor
        self._ts = max(self._ts, pending.ts)
        step = trail.add(
            Step(
                {tp: stash.resume_offset(tp, next_offsets[tp]) for tp in pending.runs},
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
            events=TransactionEvents(list(pending.runs.values()), stash.spill),
            first=pending.first,
            last=pending.last,
            is_ddl=pending.is_ddl,
            resume=partial(trail.at, step),
        )

    def checkpoint(self) -> Checkpoint:
        """The resume point for what was released so far."""
        lanes = self._lanes
        return Checkpoint(
            offsets={tp: self._stash.resume_offset(tp, o) for tp, o in lanes.next_offsets.items()},
            floors=dict(lanes.floors),
            watermarks=lanes.claims(),
            ts=self._ts,
        )

    # -- explaining ------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Events stashed (in memory or spilled)."""
        return self._stash.buffered

    @property
    def in_memory(self) -> int:
        """Stashed events held in memory."""
        return self._stash.in_memory

    def oldest_held(self) -> str | None:
        """The oldest stashed transaction, for a log line: id, source, ts, where its first
        event was read and its binlog position; None with nothing stashed."""
        p = self._stash.oldest()
        if p is None:
            return None
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
        pending = self._stash.pending
        out: list[Blocker] = []
        p = self._incomplete
        if p is not None and p.id in {k[1] for k in pending}:
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
        oldest = min((p.ts for p in pending.values()), default=None)
        out.extend(self._lanes.behind(oldest, timed=timed))
        return out

    # -- state -----------------------------------------------------------------------------

    @overload
    def state(self, *, keep_spilled: bool = False) -> MergerState: ...

    @overload
    def state(self, *, keep_spilled: bool = False, into: type[S]) -> S: ...

    def state(
        self, *, keep_spilled: bool = False, into: type[MergerState] = MergerState
    ) -> MergerState:
        """The whole state as a plain value; spilled events are read back into it, unless
        `keep_spilled`: then a transaction with spilled events is named by its index
        (`SpilledTxn`, chunks of the spill store, which must outlive the state) and only
        its events still in memory are in the stash. `into`: the record to fill, a
        `MergerState` or a subclass that adds fields of its own (with defaults; the Spark
        planner's `PlannerState`)."""
        lanes = self._lanes
        stash, spilled = self._stash.entries(keep_spilled)
        return into(
            expected=tuple(sorted(lanes.expected)),
            watermarks=dict(lanes.watermarks),
            raised_at=dict(lanes.raised_at),
            last_seen=dict(lanes.last),
            floors=dict(lanes.floors),
            offsets=dict(lanes.next_offsets),
            ts=self._ts,
            stash=stash,
            spilled=tuple(spilled),
            split=dict(self._stash.split),
        )

    @classmethod
    def from_state(
        cls,
        state: MergerState,
        *,
        memory_limit: int | None = None,
        spill: Spill | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Merger:
        """A merger in exactly the state `state` was taken in."""
        merger = cls(
            state.expected,
            floors=state.floors,
            start_offsets=state.offsets,
            memory_limit=memory_limit,
            spill=spill,
            clock=clock,
        )
        lanes, stash = merger._lanes, merger._stash
        lanes.watermarks.update(state.watermarks)
        lanes.raised_at.update(state.raised_at)
        merger._ts = state.ts
        if state.spilled and spill is None:
            raise ValueError("a state naming spilled chunks needs their spill store")
        for txn in state.spilled:
            stash.restore(txn)
        for env in state.stash:
            event = env.event
            if not isinstance(event, DataEvent):
                raise TypeError(f"{env.position}: a {type(event).__name__} cannot be stashed")
            stash.add((env.topic, env.partition), env.offset, event, event_key(event))
        stash.restore_split(state.split)
        lanes.last.update(state.last_seen)
        return merger

    # Deprecated names (docs/subscriber.md, "Renamed"): "snapshot" is the database snapshot
    # (PROTOCOL.md §9.5); the merger's own record is its state. Kept for code written before.

    @overload
    def snapshot(self, *, keep_spilled: bool = False) -> MergerState: ...

    @overload
    def snapshot(self, *, keep_spilled: bool = False, into: type[S]) -> S: ...

    def snapshot(
        self, *, keep_spilled: bool = False, into: type[MergerState] = MergerState
    ) -> MergerState:
        """Deprecated: `state()`."""
        warnings.warn("Merger.snapshot() is Merger.state()", DeprecationWarning, stacklevel=2)
        return self.state(keep_spilled=keep_spilled, into=into)

    @classmethod
    def from_snapshot(
        cls,
        snapshot: MergerState,
        *,
        memory_limit: int | None = None,
        spill: Spill | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Merger:
        """Deprecated: `from_state()`."""
        warnings.warn(
            "Merger.from_snapshot() is Merger.from_state()", DeprecationWarning, stacklevel=2
        )
        return cls.from_state(snapshot, memory_limit=memory_limit, spill=spill, clock=clock)

    def close(self) -> None:
        """Delete the spill folder, if this merger made one."""
        self._stash.close()
