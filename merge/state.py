"""The merger's whole state as a plain value, and its JSON form.

A batch planner stores the state taken after each batch (keyed by batch id) and rebuilds the
merger from it with `Merger.from_state`, so replaying a batch gives the same output. Events
in the stash are encoded with the protocol's JSON codec, so the form is open.

`MergerState` is the one record of that state: the Spark planner's `PlannerState` is a
`MergerState` with the planner's own fields added (no second copy of the fields, no
converter between two records); its stash entries are `Envelope`s, an event with its Kafka
coordinates.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rowbus.merge.checkpoint import Lane, TopicPartition, floor_from_json, floor_to_json
from rowbus.merge.exceptions import SubscriberError
from rowbus.merge.positions import Floor, PosKey, key_from_json
from rowbus.merge.spill import Chunk, DataEvent
from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import Event

Table = tuple[str, str, str | None]
"""(source, schema, table) an event touches."""

S = TypeVar("S", bound="MergerState")


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded event with its Kafka coordinates (a stash entry holds a data event)."""

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


@dataclass(frozen=True, slots=True)
class SpilledRun:
    """The spilled part of a transaction's run on one partition: chunks of its spill store."""

    topic: str
    partition: int
    head: int
    count: int
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class SpilledTxn:
    """A stashed transaction whose events are (partly) in the spill store: what the merger
    knows of it without its events — the index a planner keeps instead of the events."""

    source: str
    id: str
    ts: int
    count: int | None
    is_ddl: bool
    min_key: PosKey
    max_key: PosKey
    first: tuple[str, int, int]
    last: tuple[str, int, int]
    tables: tuple[Table, ...]
    runs: tuple[SpilledRun, ...]

    def to_json(self) -> list[Any]:
        return [
            self.source,
            self.id,
            self.ts,
            self.count,
            self.is_ddl,
            list(self.min_key),
            list(self.max_key),
            list(self.first),
            list(self.last),
            [list(t) for t in self.tables],
            [
                [r.topic, r.partition, r.head, r.count, [list(_chunk(c)) for c in r.chunks]]
                for r in self.runs
            ],
        ]

    @staticmethod
    def from_json(data: list[Any]) -> SpilledTxn:
        source, id_, ts, count, is_ddl, lo, hi, first, last, tables, runs = data
        # A long hold keeps one of these per held transaction: names are interned and equal
        # bounds (a one-event transaction's) shared, not made once per occurrence.
        low, high = key_from_json(lo), key_from_json(hi)
        begin, end = _at(first), _at(last)
        return SpilledTxn(
            sys.intern(str(source)),
            str(id_),
            int(ts),
            None if count is None else int(count),
            bool(is_ddl),
            low,
            low if high == low else high,
            begin,
            begin if end == begin else end,
            tuple(
                (sys.intern(str(a)), sys.intern(str(b)), None if c is None else sys.intern(str(c)))
                for a, b, c in tables
            ),
            tuple(
                SpilledRun(
                    sys.intern(str(t)),
                    int(p),
                    int(h),
                    int(n),
                    tuple(Chunk(*map(int, c)) for c in cs),
                )
                for t, p, h, n, cs in runs
            ),
        )


def _at(items: list[Any]) -> tuple[str, int, int]:
    return (sys.intern(str(items[0])), int(items[1]), int(items[2]))


_COMPACT = (",", ":")


def _spilled(parsed: list[Any]) -> tuple[SpilledTxn, ...]:
    """The index from its parsed lists, each list released once read (a long hold's parsed
    index is several times its objects' size)."""
    out = []
    for i, item in enumerate(parsed):
        out.append(SpilledTxn.from_json(item))
        parsed[i] = None
    return tuple(out)


def _chunk(c: Chunk) -> tuple[int, int, int, int]:
    return (c.segment, c.start, c.size, c.count)


@dataclass(slots=True)
class MergerState:
    """Stash + watermarks + last positions (+ floors and offsets), enough to rebuild a merger."""

    expected: tuple[Lane, ...] = ()
    watermarks: dict[Lane, int] = field(default_factory=dict)
    raised_at: dict[Lane, int] = field(default_factory=dict)
    """The offset that raised each lane's watermark."""
    last_seen: dict[Lane, PosKey] = field(default_factory=dict)
    """The last order key taken per lane (the duplicate rule)."""
    floors: dict[str, Floor] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    """The next Kafka offset to read per partition."""
    ts: int = 0
    stash: list[Envelope] = field(default_factory=list)
    """The held data events, in the merger's order."""
    spilled: tuple[SpilledTxn, ...] = ()
    """Transactions whose events are in the spill store (`Merger.state(keep_spilled=True)`);
    events of theirs still in memory are in `stash`, after the spilled ones."""
    split: dict[tuple[str, str], int] = field(default_factory=dict)
    """(source, transaction id) → events left of a transaction split by a shard-DDL hold
    (`Merger.release`): the stashed remainder is complete with that many, fewer than its
    events' `txn.count`."""

    def to_json(self) -> str:
        """The merger's part of this state as one JSON document."""
        head = json.dumps(
            {
                "expected": [list(lane) for lane in self.expected],
                "watermarks": [
                    [*lane, wm, self.raised_at.get(lane, 0)]
                    for lane, wm in sorted(self.watermarks.items())
                ],
                "last_positions": [
                    [*lane, list(key)] for lane, key in sorted(self.last_seen.items())
                ],
                "floors": {s: floor_to_json(f) for s, f in sorted(self.floors.items())},
                "next_offsets": [[*tp, o] for tp, o in sorted(self.offsets.items())],
                "ts": self.ts,
                "stash": [
                    [e.topic, e.partition, e.offset, encode(e.event, Encoding.JSON)[0].decode()]
                    for e in self.stash
                ],
            },
            separators=_COMPACT,
        )
        # The held transactions' index one at a time (the text json.dumps would make of the
        # whole list): a long hold's index is never all JSON lists at once.
        spilled = ",".join(json.dumps(t.to_json(), separators=_COMPACT) for t in self.spilled)
        split = json.dumps(
            [[src, txn, n] for (src, txn), n in sorted(self.split.items())], separators=_COMPACT
        )
        return f'{head[:-1]},"spilled":[{spilled}],"split":{split}}}'

    @classmethod
    def from_json(cls: type[S], text: str | bytes) -> S:
        """Inverse of `to_json`; SubscriberError if `text` is not a merger's state."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SubscriberError(f"not a merger's state: {exc}") from exc
        return cls.from_data(data)

    @classmethod
    def from_data(cls: type[S], data: dict[str, Any]) -> S:
        """`from_json` of the parsed document (a `PlannerState` reads its merger part with
        it); the held transactions' parsed lists are dropped from `data` as they are read."""
        try:
            marks = data["watermarks"]
            stash = []
            for t, p, o, value in data["stash"]:
                event = decode(value.encode("utf-8"), None)
                if not isinstance(event, DataEvent):
                    raise TypeError(f"a {type(event).__name__} cannot be stashed")
                stash.append(Envelope(str(t), int(p), int(o), event))
            return cls(
                expected=tuple((str(t), int(p), str(s)) for t, p, s in data["expected"]),
                watermarks={(str(t), int(p), str(s)): int(w) for t, p, s, w, _ in marks},
                raised_at={(str(t), int(p), str(s)): int(o) for t, p, s, _, o in marks},
                last_seen={
                    (str(t), int(p), str(s)): key_from_json(k)
                    for t, p, s, k in data["last_positions"]
                },
                floors={str(s): floor_from_json(f) for s, f in data["floors"].items()},
                offsets={(str(t), int(p)): int(o) for t, p, o in data["next_offsets"]},
                ts=int(data["ts"]),
                stash=stash,
                spilled=_spilled(data.get("spilled", [])),
                split={(str(src), str(txn)): int(n) for src, txn, n in data.get("split", ())},
            )
        except (ValueError, KeyError, TypeError, ProtocolError) as exc:
            raise SubscriberError(f"not a merger's state: {exc}") from exc
