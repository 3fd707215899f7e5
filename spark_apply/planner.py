"""The micro-batch planner: stash + watermarks → what a batch releases, cut at DDL.

Pure Python over decoded events, no I/O, no Spark: `plan(previous_state, batch, expected)` is a
function, so a replayed batch (same previous state, same records) computes exactly the same
plan. The state it returns is what the sink stores with the batch's checkpoint.

Per batch:

1. Records are taken in Kafka order (topic, partition, offset). RESOLVED and HEARTBEAT raise the
   watermark of their (topic, partition, source); a row or DDL that does not advance past the
   last one seen for its (topic, partition, source) is dropped (aborted records on brokers that
   do not hide them, replays by a reader); the others join the stash.
2. The release bound is the minimum watermark over the expected (topic, partition, source)
   pairs: every event at or below it has arrived, in every partition.
3. Stashed events at or below the bound are released in merge order — ``(ts, source, index in
   transaction)`` —, split into steps at each DDL (a DDL ends its step: rows before it, then
   it). A DDL that `ddl_ready` refuses (a shard DDL waiting for its group) stays stashed with
   every later event of its table (source, schema, table); other tables keep flowing.
4. The rest is the new stash.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from rowbus.protocol.codec import decode, encode
from rowbus.protocol.events import DdlChange, Event, Heartbeat, Resolved, RowChange

log = logging.getLogger(__name__)

PairKey = tuple[str, int, str]
"""(topic, partition, source): the unit a watermark is tracked for."""
PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded event with its Kafka coordinates."""

    topic: str
    partition: int
    offset: int
    event: Event

    @property
    def position(self) -> str:
        """``topic[partition]@offset``, plus the binlog position when the event has one."""
        where = f"{self.topic}[{self.partition}]@{self.offset}"
        pos = getattr(self.event, "position", None)
        return f"{where} (binlog {pos})" if pos is not None else where

    @property
    def order(self) -> tuple[int, str, int, str, int, int]:
        """Merge order: ts, source, index in the transaction, then Kafka coordinates."""
        ev = self.event
        txn = getattr(ev, "txn", None)
        return (ev.ts, ev.source, txn.index if txn else -1, self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class Step:
    """Rows to apply (in order), then at most one DDL."""

    rows: tuple[Envelope, ...]
    ddl: Envelope | None = None


@dataclass(slots=True)
class PlannerState:
    """What one batch leaves to the next: watermarks, the last event seen per pair, the next
    Kafka offset per partition, and the stash (in merge order)."""

    watermarks: dict[PairKey, int] = field(default_factory=dict)
    last_seen: dict[PairKey, tuple[int, int]] = field(default_factory=dict)
    offsets: dict[PartitionKey, int] = field(default_factory=dict)
    stash: list[Envelope] = field(default_factory=list)
    released_through: int = -1
    """The highest release bound so far (never decreases)."""

    def copy(self) -> PlannerState:
        return PlannerState(
            dict(self.watermarks),
            dict(self.last_seen),
            dict(self.offsets),
            list(self.stash),
            self.released_through,
        )

    def to_bytes(self) -> bytes:
        """A stable binary form: a JSON header, then the stash events (protobuf), framed."""
        blobs = [encode(e.event)[0] for e in self.stash]
        header = {
            "v": 1,
            "watermarks": sorted([*k, v] for k, v in self.watermarks.items()),
            "last_seen": sorted([*k, *v] for k, v in self.last_seen.items()),
            "offsets": sorted([*k, v] for k, v in self.offsets.items()),
            "released_through": self.released_through,
            "stash": [
                [e.topic, e.partition, e.offset, len(b)]
                for e, b in zip(self.stash, blobs, strict=True)
            ],
        }
        head = json.dumps(header, separators=(",", ":")).encode()
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
            assert isinstance(event, RowChange | DdlChange)
            stash.append(Envelope(topic, partition, offset, event))
        return PlannerState(
            watermarks={(t, p, s): v for t, p, s, v in header["watermarks"]},
            last_seen={(t, p, s): (ts, i) for t, p, s, ts, i in header["last_seen"]},
            offsets={(t, p): o for t, p, o in header["offsets"]},
            stash=stash,
            released_through=header["released_through"],
        )

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
) -> Plan:
    """The plan of one batch over `previous` (not modified); deterministic."""
    state = previous.copy()
    incoming: list[Envelope] = []
    dropped = 0
    for env in sorted(batch, key=lambda e: (e.topic, e.partition, e.offset)):
        part = (env.topic, env.partition)
        state.offsets[part] = max(state.offsets.get(part, 0), env.offset + 1)
        ev = env.event
        pair = (env.topic, env.partition, ev.source)
        match ev:
            case Resolved() | Heartbeat():
                if ev.ts > state.watermarks.get(pair, -1):
                    state.watermarks[pair] = ev.ts
            case RowChange() | DdlChange():
                mark = (ev.ts, ev.txn.index if ev.txn else -1)
                if mark <= state.last_seen.get(pair, (-1, -1)):
                    dropped += 1
                    log.debug("dropping %s: does not advance past %s", env.position, mark)
                    continue
                state.last_seen[pair] = mark
                incoming.append(env)
    pending = sorted([*state.stash, *incoming], key=lambda e: e.order)
    bound = max(state.watermark(expected), state.released_through)
    steps, state.stash = _release(pending, bound, ddl_ready)
    state.released_through = bound
    return Plan(steps=steps, state=state, bound=bound, dropped=dropped)


def _release(
    pending: list[Envelope], bound: int, ddl_ready: Callable[[Envelope], bool]
) -> tuple[tuple[Step, ...], list[Envelope]]:
    steps: list[Step] = []
    rows: list[Envelope] = []
    seen_ddl: set[tuple[str, int, str, int]] = set()
    held: set[tuple[str, str, str | None]] = set()  # tables behind a DDL that is not ready
    kept: list[Envelope] = []
    for i, env in enumerate(pending):
        ev = env.event
        if ev.ts > bound:
            kept.extend(pending[i:])
            break
        assert isinstance(ev, RowChange | DdlChange)
        if (ev.source, ev.schema, ev.table) in held:
            kept.append(env)
            continue
        if isinstance(ev, DdlChange):
            key = (ev.source, ev.ts, ev.position.file, ev.position.offset)
            if key in seen_ddl:  # the same DDL broadcast to several partitions
                continue
            if not ddl_ready(env):
                held.add((ev.source, ev.schema, ev.table))
                kept.append(env)
                continue
            seen_ddl.add(key)
            steps.append(Step(tuple(rows), env))
            rows = []
        else:
            rows.append(env)
    steps.append(Step(tuple(rows)))
    return tuple(steps), kept
