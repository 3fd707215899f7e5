"""Snapshot progress: what the reader's checkpoint carries (`ReaderCheckpoint.snapshot`, JSON).

Every table has *segments*: key ranges and the binlog position their rows were read at. A first
snapshot reads everything at one position P (the streaming start), one segment per table. A
reader killed mid-snapshot cannot get its read view back: it opens a new one at P' > P and reads
the rest there — the key range after the table's last committed chunk, and every table not
started — as new segments at P'. Streaming still starts at P (the completed ranges need the
changes after P), and `keep` drops a streamed change of a row whose segment was read at or
after the change's position: the row already shows it. So no change is lost and none is
applied twice. Ranges are compared in Python, which orders integers as the server does;
a table whose key is not all-integer is read again from its start at P' instead, and its
changes after P are all kept (replayed over newer rows they converge: idempotent, no loss).
A table without a primary key is read in chunks cut from one scan (no key orders them); begun
and not done, it is read again from its start at P' as one new segment: its changes before P'
are all shown by those rows, and none after is (rows identified by all their columns cannot be
told apart finer, PROTOCOL.md §9.3). A table read again from its start counts it in
`TableProgress.restarts`, which the reader puts in the snapshot's id: the new `snapshot_begin`
tells consumers the rows of the first attempt are superseded (PROTOCOL.md §9.7).

Snapshot rows are published at P (`position`) with `txn.index` = `seq`, a counter over the
whole snapshot, so their order key grows and stays below every streamed change (PROTOCOL.md
§9.5).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from rowbus.protocol.codec.jsonc import value_from_json, value_to_json
from rowbus.protocol.events import BinlogPosition, Op, TableSchema
from rowbus.protocol.values import Value

INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})


class SnapshotMode(Enum):
    """``reader.snapshot``: when a reader snapshots its source (README, Snapshots)."""

    INITIAL = "initial"
    """Snapshot on the first start (no checkpoint yet), then stream from its position."""
    WHEN_NEEDED = "when_needed"
    """Like initial, and again whenever the checkpoint's binlog position is no longer on the
    server (purged): the sink is made whole again instead of the reader failing."""
    NEVER = "never"
    """No snapshot: stream from `reader.start` (only changes in the binlog window arrive)."""
    SCHEMA_ONLY = "schema_only"
    """Publish every table's schema, no rows, and stream from the current position."""


def _pos(p: BinlogPosition) -> list[Any]:
    return [p.file, p.offset, p.gtid, p.upstream]


def _pos_from(x: list[Any]) -> BinlogPosition:
    upstream = int(x[3]) if len(x) > 3 else 0
    return BinlogPosition(str(x[0]), int(x[1]), None if x[2] is None else str(x[2]), upstream)


def _before(a: BinlogPosition, b: BinlogPosition) -> bool:
    """Binlog order, upstream first (PROTOCOL.md §9.4)."""
    return (a.upstream, a.file_number, a.file, a.offset) < (
        b.upstream,
        b.file_number,
        b.file,
        b.offset,
    )


@dataclass
class Segment:
    """Rows with a key above `after` (None: from the first key), up to the next segment's
    `after`, were read at `position`."""

    position: BinlogPosition
    after: tuple[Value, ...] | None


@dataclass
class TableProgress:
    """One table's snapshot: rows committed, the last committed key, its segments."""

    name: str
    estimate: int = 0
    rows: int = 0
    last_key: tuple[Value, ...] | None = None
    done: bool = False
    integer_key: bool = True
    segments: list[Segment] = field(default_factory=list)
    chunks: int = 0
    keyless: bool = False
    """No primary key: chunks are cuts of one scan, and a resume reads it again (module doc)."""
    restarts: int = 0
    """Times its reading started over from its first row after some rows were published."""

    def to_json(self) -> dict[str, Any]:
        return {
            "estimate": self.estimate,
            "rows": self.rows,
            "last_key": None
            if self.last_key is None
            else [value_to_json(v) for v in self.last_key],
            "done": self.done,
            "integer_key": self.integer_key,
            "chunks": self.chunks,
            "keyless": self.keyless,
            "restarts": self.restarts,
            "segments": [
                [
                    _pos(s.position),
                    None if s.after is None else [value_to_json(v) for v in s.after],
                ]
                for s in self.segments
            ],
        }

    @staticmethod
    def from_json(name: str, d: dict[str, Any]) -> TableProgress:
        def key(x: Any) -> tuple[Value, ...] | None:
            return None if x is None else tuple(value_from_json(v) for v in x)

        return TableProgress(
            name=name,
            estimate=int(d.get("estimate", 0)),
            rows=int(d["rows"]),
            last_key=key(d.get("last_key")),
            done=bool(d["done"]),
            integer_key=bool(d.get("integer_key", True)),
            chunks=int(d.get("chunks", 0)),
            keyless=bool(d.get("keyless", False)),
            restarts=int(d.get("restarts", 0)),
            segments=[Segment(_pos_from(p), key(a)) for p, a in d.get("segments", [])],
        )

    def segment_for(self, key: tuple[Value, ...]) -> Segment | None:
        found = None
        for seg in self.segments:
            if seg.after is None or key > seg.after:
                found = seg
            else:
                break
        return found


@dataclass
class Backfill:
    """One table of an incremental snapshot (`rowbus snapshot`, PROTOCOL.md §9.5 item 5): the
    last key published, rows and chunks so far; `refused`: why it is not read (one line)."""

    name: str
    after: tuple[Value, ...] | None = None
    rows: int = 0
    chunks: int = 0
    done: bool = False
    refused: str | None = None
    marker: str | None = None
    """The snapshot id its `snapshot_begin` named (PROTOCOL.md §9.7), for its end; None when
    markers are off or no chunk was published yet."""

    def to_json(self) -> dict[str, Any]:
        return {
            "after": None if self.after is None else [value_to_json(v) for v in self.after],
            "rows": self.rows,
            "chunks": self.chunks,
            "done": self.done,
            "refused": self.refused,
            "marker": self.marker,
        }

    @staticmethod
    def from_json(name: str, d: dict[str, Any]) -> Backfill:
        after = d.get("after")
        return Backfill(
            name=name,
            after=None if after is None else tuple(value_from_json(v) for v in after),
            rows=int(d.get("rows", 0)),
            chunks=int(d.get("chunks", 0)),
            done=bool(d.get("done", False)),
            refused=d.get("refused"),
            marker=d.get("marker"),
        )


@dataclass
class SnapshotState:
    """A source's snapshot: the streaming start `position`, the tables, the row counter."""

    position: BinlogPosition
    tables: dict[str, TableProgress]
    seq: int = 0
    done: bool = False
    started: float = field(default_factory=time.time)
    finished: float | None = None
    restarts: int = 0
    backfills: dict[str, Backfill] = field(default_factory=dict)
    """Incremental snapshots asked for while streaming, by table (`incremental`)."""
    signal_offset: int = 0
    """The next signal-topic offset to read (signals before it were taken)."""

    # ---- persistence -------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "position": _pos(self.position),
                "seq": self.seq,
                "done": self.done,
                "started": self.started,
                "finished": self.finished,
                "restarts": self.restarts,
                "tables": {n: t.to_json() for n, t in self.tables.items()},
                "backfills": {n: b.to_json() for n, b in self.backfills.items()},
                "signal_offset": self.signal_offset,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @staticmethod
    def from_json(text: str) -> SnapshotState:
        d = json.loads(text)
        if d.get("v") != 1:
            raise ValueError(f"snapshot state version {d.get('v')!r} is not 1")
        return SnapshotState(
            position=_pos_from(d["position"]),
            tables={n: TableProgress.from_json(n, t) for n, t in d["tables"].items()},
            seq=int(d["seq"]),
            done=bool(d["done"]),
            started=float(d.get("started") or 0.0),
            finished=d.get("finished"),
            restarts=int(d.get("restarts", 0)),
            backfills={n: Backfill.from_json(n, b) for n, b in d.get("backfills", {}).items()},
            signal_offset=int(d.get("signal_offset", 0)),
        )

    # ---- planning ------------------------------------------------------------------------------

    @staticmethod
    def start(
        position: BinlogPosition, tables: list[TableSchema], estimates: dict[str, int]
    ) -> SnapshotState:
        """A new snapshot of `tables`, all read at `position`."""
        progress = {}
        for t in tables:
            progress[t.qualified] = TableProgress(
                name=t.qualified,
                estimate=estimates.get(t.qualified, 0),
                integer_key=has_integer_key(t),
                keyless=not t.primary_key,
                segments=[Segment(position, None)],
            )
        return SnapshotState(position, progress)

    def resume_at(self, position: BinlogPosition) -> None:
        """The reader resumes with a new read view at `position`: what is not committed yet is
        read there (see the module docstring)."""
        self.restarts += 1
        for t in self.tables.values():
            if t.done:
                continue
            if t.last_key is None:
                t.segments = [Segment(position, None)]
            elif t.keyless:
                # Read again from the start at `position`, which shows every change before it.
                t.segments = [Segment(position, None)]
                t.last_key, t.rows, t.chunks = None, 0, 0
                t.restarts += 1
            elif t.integer_key:
                t.segments.append(Segment(position, t.last_key))
            else:
                t.last_key = None  # read again from the start; its changes since P all kept
                t.rows = 0
                t.chunks = 0
                t.restarts += 1

    def pending(self) -> list[TableProgress]:
        return [t for t in self.tables.values() if not t.done]

    def half_published_keyless(self) -> list[TableProgress]:
        """Keyless tables whose snapshot began (some rows, or an earlier attempt, published)
        and did not end. Only markers let consumers take those rows back: without a new
        `snapshot_begin` to empty the table, reading it again would double them (PROTOCOL.md
        §9.7)."""
        return [t for t in self.pending() if t.keyless and (t.chunks or t.restarts)]

    # ---- the streamed changes ------------------------------------------------------------------

    @property
    def horizon(self) -> BinlogPosition:
        """The latest position a segment was read at: past it, every change is kept."""
        latest = self.position
        for t in self.tables.values():
            for s in t.segments:
                if _before(latest, s.position):
                    latest = s.position
        return latest

    def filtering(self, at: BinlogPosition) -> bool:
        """Whether a change at `at` may be one a snapshot row already shows."""
        return _before(at, self.horizon)

    def shown(self, qualified: str, key: tuple[Value, ...], at: BinlogPosition) -> bool:
        """Whether the snapshot row of `key` was read after the change at `at`."""
        t = self.tables.get(qualified)
        if t is None:
            return False
        seg = t.segment_for(key)
        # The row was read at the segment's position: it shows every change committed before.
        return seg is not None and _before(at, seg.position)

    def keep(
        self,
        qualified: str,
        op: Op,
        before_key: tuple[Value, ...] | None,
        after_key: tuple[Value, ...] | None,
        at: BinlogPosition,
    ) -> Op | None:
        """What of a streamed change at `at` still has to be published: `op`, the half of a
        key-changing update that is not shown yet (DELETE of the old key or INSERT of the new),
        or None."""
        drop_before = before_key is not None and self.shown(qualified, before_key, at)
        drop_after = after_key is not None and self.shown(qualified, after_key, at)
        if op is Op.UPDATE and before_key != after_key:
            if drop_before and drop_after:
                return None
            if drop_before:
                return Op.INSERT
            if drop_after:
                return Op.DELETE
            return op
        return None if (drop_after if after_key is not None else drop_before) else op

    def compact(self) -> None:
        """Once streaming passed the horizon, segments are history: keep the counts only."""
        for t in self.tables.values():
            t.segments = []
            t.last_key = None


def has_integer_key(table: TableSchema) -> bool:
    by_name = {c.name: c for c in table.columns}
    return bool(table.primary_key) and all(
        by_name[k].type in INTEGER_TYPES for k in table.primary_key
    )
