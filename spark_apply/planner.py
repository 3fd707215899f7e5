"""The micro-batch planner: a batch adapter over `rowbus.merge.Merger`, cut at DDL.

Pure Python over decoded events, no I/O, no Spark: `plan(previous_state, batch, expected)` is a
function of the stored state and the batch's records, so a replayed batch (same previous state,
same records) computes exactly the same plan. The state it returns is what the sink stores with
the batch's checkpoint.

There is one merge engine: a batch rebuilds the `Merger` from the stored state
(`Merger.from_state`), pushes the batch's records in Kafka order, and releases what the
merger releases — the same transactions, in the same order, as a `Subscriber` reading the same
records: de-duplication by the protocol's order key, `txn.count` completeness (so a fragmented
transaction, PROTOCOL.md §9.1, is released whole or not at all), every source seen on a topic
gating it, XA transactions as the reader publishes them (at their commit).

Per batch:

1. The lanes that gate the release are those stored with the state; `expected` is used only
   for a state that has none yet (the first batch). A source that appears on a lane not
   expected joins the gate (the merger learns it from the record itself), so the plan never
   depends on live metadata.
2. Released transactions are split into steps at each DDL (a DDL ends its step: rows before
   it, then it). A DDL that `ddl_ready` refuses (a shard DDL waiting for its group) stays
   stashed with every later event of its table; other tables keep flowing, and a transaction
   spanning the waiting table and others is split (`rowbus.merge.hold`; the plan lists
   the splits, the state keeps what is left of each, `PlannerState.split`).
3. What the merger still holds is the new stash. With a spill store (`spill`, the sink's
   `sink_spill.PieceSpill`) it holds at most `memory_limit` events in memory while planning, and
   spills everything it still holds at the end: the state then names chunks of stored pieces
   (`SpilledTxn`, a compact index per transaction), not events, and a released transaction
   is read back lazily (`Rows`) while it is applied. See spark_apply/README.md, "Stash".
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from rowbus.merge.checkpoint import Lane, TopicPartition
from rowbus.merge.merger import Merger, Split
from rowbus.merge.spill import Spill
from rowbus.merge.state import Envelope, MergerState
from rowbus.merge.transaction import KafkaPosition, TransactionEvents
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.events import DdlChange, Event, RowChange, SnapshotBegin, SnapshotEnd

__all__ = [
    "Envelope",
    "PairKey",
    "PartitionKey",
    "Plan",
    "PlannerState",
    "Rows",
    "Step",
    "plan",
    "stored_gate",
]

log = logging.getLogger(__name__)

PairKey = Lane
"""(topic, partition, source): the unit a watermark is tracked for."""
PartitionKey = TopicPartition
_MAX_RELEASES = 1_000_000
"""Bound on release rounds per batch (each ends at a DDL, so this many DDLs in one batch)."""


class Rows:
    """A step's rows, in order: envelopes and whole released transactions, the latter read
    lazily (from the spill store when spilled), so a huge transaction is never in memory
    whole. Iterable more than once; equal to a tuple of the same envelopes."""

    __slots__ = ("_len", "_parts")

    def __init__(self, parts: Sequence[tuple[Envelope, ...] | TransactionEvents] = ()) -> None:
        self._parts = tuple(p for p in parts if len(p))
        self._len = sum(len(p) for p in self._parts)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Envelope]:
        for part in self._parts:
            if isinstance(part, TransactionEvents):
                for topic, partition, offset, event in part.located():
                    yield Envelope(topic, partition, offset, event)
            else:
                yield from part

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self._len} rows in {len(self._parts)} parts)"


@dataclass(frozen=True, slots=True)
class Step:
    """Rows to apply (in order), then at most one DDL or snapshot marker (PROTOCOL.md §9.7)."""

    rows: Rows | tuple[Envelope, ...]
    ddl: Envelope | None = None


@dataclass(slots=True)
class PlannerState(MergerState):
    """What one batch leaves to the next: the merger's state (lanes, watermarks, the last
    order key per lane, floors, the next Kafka offset per partition, the stash of envelopes in
    the merger's order) — it *is* a `MergerState`, the merger rebuilds from it as it is —
    and the planner's own fields below."""

    released_through: int = -1
    """The highest release bound so far (never decreases)."""
    reread: dict[TopicPartition, int] = field(default_factory=dict)
    """Throughput mode: per partition, the offset its held rows start at. They are not in
    the stash: the next batch reads them again from Kafka, and the lanes' `last_seen` and the
    floors name only what was released, so the re-read records already applied are dropped
    by the merge engine's own rules (spark_apply README "Throughput mode")."""

    @property
    def stash_events(self) -> int:
        """Events held: in memory and in pieces."""
        return len(self.stash) + sum(r.count for t in self.spilled for r in t.runs)

    def segments(self) -> set[int]:
        """The piece segments (batch ids) this state refers to."""
        return {c.segment for t in self.spilled for r in t.runs for c in r.chunks}

    def copy(self) -> PlannerState:
        return replace(
            self,
            watermarks=dict(self.watermarks),
            raised_at=dict(self.raised_at),
            last_seen=dict(self.last_seen),
            floors=dict(self.floors),
            offsets=dict(self.offsets),
            stash=list(self.stash),
            reread=dict(self.reread),
            split=dict(self.split),
        )

    def without_stash(self) -> PlannerState:
        """This state with an empty stash (the part stored in one bounded header row)."""
        return replace(self, stash=[])

    def to_bytes(self) -> bytes:
        """A stable binary form: a JSON header (the merger's state without its stash), then
        the stash events (protobuf), framed."""
        blobs = [encode(e.event)[0] for e in self.stash]
        compact = (",", ":")
        reread = json.dumps(
            [[t, p, o] for (t, p), o in sorted(self.reread.items())], separators=compact
        )
        stash = json.dumps(
            [
                [e.topic, e.partition, e.offset, len(b)]
                for e, b in zip(self.stash, blobs, strict=True)
            ],
            separators=compact,
        )
        # The merger's document goes in as the text it is (parsing it back to embed it would
        # hold a long hold's index as JSON lists); the bytes are json.dumps' of the header.
        head = (
            f'{{"v":{3 if self.spilled else 2},"merger":{self.without_stash().to_json()},'
            f'"released_through":{self.released_through},"reread":{reread},"stash":{stash}}}'
        ).encode()
        return struct.pack(">I", len(head)) + head + b"".join(blobs)

    @staticmethod
    def from_bytes(data: bytes) -> PlannerState:
        (n,) = struct.unpack_from(">I", data)
        header = json.loads(data[4 : 4 + n])
        pos = 4 + n
        stash = []
        for topic, partition, offset, size in header["stash"]:
            event = decode(data[pos : pos + size], None)
            pos += size
            assert isinstance(event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd)
            stash.append(Envelope(topic, partition, offset, event))
        if header.get("v", 1) == 1:
            # A state stored before the planner used the merger: its watermarks, offsets and
            # stash carry over; its last-seen marks were (ts, index), not order keys, and the
            # batches after it read only new offsets, so they are not needed.
            return PlannerState(
                watermarks={(t, p, s): v for t, p, s, v in header["watermarks"]},
                offsets={(t, p): o for t, p, o in header["offsets"]},
                stash=stash,
                released_through=header["released_through"],
            )
        state = PlannerState.from_data(header.pop("merger"))
        state.stash = stash
        state.released_through = header["released_through"]
        state.reread = {(t, int(p)): int(o) for t, p, o in header.get("reread", ())}
        return state

    def watermark(self, expected: Collection[PairKey]) -> int:
        """The minimum watermark over `expected` (-1 if one has none yet, or none expected)."""
        if not expected:
            return -1
        return min(self.watermarks.get(pair, -1) for pair in expected)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a batch applies, step by step, and the state to store with it."""

    steps: tuple[Step, ...]
    state: PlannerState
    bound: int
    dropped: int = 0
    spill: Spill | None = field(default=None, compare=False)
    """The batch's spill store: holds events of the steps and of the new state until the
    sink stored them (`StateStore.save`)."""
    held_in_memory: int = 0
    """The most held events the planner's merger kept in memory at once."""
    gates: tuple[tuple[str, bool], ...] = ()
    """The DDL gate's answers, by Kafka position (``topic[partition]@offset``): the sink
    stores them before it commits any part of the batch, and a replay of a batch that has
    parts committed plans with them (`stored_gate`), not with the live shard-DDL state."""
    splits: tuple[Split, ...] = ()
    """Transactions the shard-DDL hold split in this batch (`Merger.release`)."""
    held: str | None = None
    """The oldest transaction still held after this batch (`Merger.oldest_held`), or None."""
    blockers: tuple[str, ...] = ()
    """Why what is held waits (`Merger.blocked_by`): lanes behind, an incomplete transaction;
    empty with nothing held."""

    @property
    def row_count(self) -> int:
        return sum(len(s.rows) for s in self.steps)


def _always(_: Envelope) -> bool:
    return True


def plan(
    previous: PlannerState,
    batch: Iterable[Envelope],
    expected: Collection[PairKey],
    ddl_ready: Callable[[Envelope], bool] = _always,
    *,
    spill: Spill | None = None,
    memory_limit: int | None = None,
) -> Plan:
    """The plan of one batch over `previous` (not modified); deterministic.

    `spill`: where held events go (chunks `previous` names must be readable there); the
    merger keeps at most `memory_limit` events in memory and the new state holds none."""
    start = previous
    if not start.expected:
        start = replace(start, expected=tuple(sorted(set(expected))))
    # A constant clock: nothing of the plan may depend on when it is computed.
    merger = Merger.from_state(
        start,
        clock=lambda: 0.0,
        spill=spill,
        memory_limit=memory_limit if spill is not None else None,
    )
    for env in sorted(batch, key=lambda e: (e.topic, e.partition, e.offset)):
        merger.push(env.topic, env.partition, env.offset, env.event)

    answers: dict[KafkaPosition, bool] = {}

    def gate(event: DdlChange, at: KafkaPosition) -> bool:
        # Asked once per DDL and batch: the answer holds for the whole plan.
        if at not in answers:
            answers[at] = ddl_ready(_envelope(at, event))
        return answers[at]

    steps: list[Step] = []
    parts: list[tuple[Envelope, ...] | TransactionEvents] = []
    for _ in range(_MAX_RELEASES):
        released = merger.release(until_ddl=True, ddl_ready=gate)
        if not released:
            break
        for txn in released:
            barrier = txn.ddl or txn.marker  # a snapshot marker ends a step like a DDL
            if barrier is not None:
                steps.append(Step(Rows(parts), _envelope(txn.first, barrier)))
                parts = []
            else:
                parts.append(txn.events)
    steps.append(Step(Rows(parts)))
    if spill is not None:
        merger.spill_all()
    held = merger.oldest_held()
    blockers = tuple(str(b) for b in merger.blocked_by(timed=False)) if held else ()
    state = merger.state(keep_spilled=spill is not None, into=PlannerState)
    bound = max(merger.watermark, previous.released_through)
    state.released_through = bound
    dropped = merger.stats.duplicates + merger.stats.behind_floor
    peak = merger.stats.peak_in_memory
    merger.close()
    gates = tuple(sorted((str(at), ok) for at, ok in answers.items()))
    splits = tuple(merger.splits)
    return Plan(tuple(steps), state, bound, dropped, spill, peak, gates, splits, held, blockers)


def _envelope(at: KafkaPosition, event: Event) -> Envelope:
    return Envelope(at.topic, at.partition, at.offset, event)


def stored_gate(
    stored: Collection[tuple[str, bool]], live: Callable[[Envelope], bool]
) -> Callable[[Envelope], bool]:
    """The DDL gate of a replayed batch: the answers its first attempt planned with (`live` is
    still asked, for its side effects: a held DDL is reported again)."""
    answers = dict(stored)

    def gate(env: Envelope) -> bool:
        now = live(env)
        key = str(KafkaPosition(env.topic, env.partition, env.offset))
        if key not in answers:
            log.warning("%s: no stored gate answer for this DDL; the live one is used", key)
        return answers.get(key, now)

    return gate
