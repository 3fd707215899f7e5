"""Throughput mode's release: bound and state from lane summaries, no row on the driver.

Pure. The merge engine (`rowbus.merge.Merger`, through `planner.plan`) decides a batch from its
events; in throughput mode the executors read and decode the batch and hand the driver one
`LanePiece` per (read task, lane). This module computes from those pieces and the stored
`PlannerState` exactly what the merger would, for the batches it accepts:

- the lane watermarks (highest Resolved/Heartbeat ts per lane, with the offset that raised it)
  and the release mark, the minimum over the expected lanes (`Merger.watermark`);
- after the executors reported, per lane, the last key and the highest ts at or below the
  mark, and per partition the first offset of a row above it (`Released`): the new state —
  lanes' last keys and sources' floors raised to what was released, next offsets, and
  `reread`, where the held rows are read again by the next batch.

The executors apply the merger's push rules themselves (`throughput.read_and_key`: a row whose
order key does not pass its lane's last one, or that a floor covers, is dropped), so the rows
the pieces describe are the ones the merger would stash. The rest of the merger's rules are
conditions for accepting a batch; `bound` answers a reason instead when one fails, and the
driver then plans that batch with the merger itself (`planner.plan`):

- nothing in the sink's stash (the previous batch left everything held in `reread`);
- no DDL or record the native reader does not render (the executors report it);
- every lane already expected (a source new on a topic changes the gate);
- on each lane the kept rows' ts never decrease and the keys of the pieces follow one another
  (a duplicate across two read tasks of one partition would be seen only by the merger);
- every row at or below the mark belongs to a complete transaction: by PROTOCOL.md §9 and
  §9.1, no Resolved passes a transaction's ts before all its events (every fragment) are
  published on every partition, and a lane's watermark is raised only by a record read, so a
  transaction at or below the mark has all its events in this batch or in `reread` — with
  nothing stashed, in what this batch reads.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rowbus.merge.checkpoint import Lane, TopicPartition
from rowbus.merge.positions import Floor, PosKey
from rowbus.spark_apply.planner import PlannerState


@dataclass(slots=True)
class LanePiece:
    """What one read task saw of one lane, in offset order (filled in place by that task as
    its records pass, then shipped to the driver as a tuple of these fields)."""

    topic: str
    partition: int
    source: str
    watermark: int = 0
    """The highest Resolved/Heartbeat ts (0: none)."""
    raised_at: int = 0
    """The offset of the first record that carried `watermark`."""
    rows: int = 0
    """Rows kept (not dropped as duplicates or behind a floor)."""
    first_offset: int = -1
    first_key: PosKey | None = None
    last_key: PosKey | None = None
    first_ts: int = 0
    last_ts: int = 0
    ordered: bool = True
    """The kept rows' ts never decrease in offset order."""

    @property
    def lane(self) -> Lane:
        return (self.topic, self.partition, self.source)


@dataclass(frozen=True, slots=True)
class Bound:
    """The release of a batch the executors can apply: rows with ts <= `mark` go."""

    mark: int
    watermarks: dict[Lane, int]
    raised_at: dict[Lane, int]
    expected: tuple[Lane, ...]

    @property
    def released_through(self) -> int:
        return self.mark


@dataclass(frozen=True, slots=True)
class Released:
    """What the executors released, reported after the mark: per lane the last order key and
    the highest ts at or below it; per partition the first offset of a held row, and the next
    offset after every record read."""

    last: Mapping[Lane, tuple[PosKey, int]]
    held: Mapping[TopicPartition, int]
    next_offsets: Mapping[TopicPartition, int]


TAIL_GROUPS = 64
"""Runs of equal ts a read task keeps per lane (`Tail`): a batch whose mark falls before them
asks the JVM for its release instead (`throughput.released_rows`)."""


@dataclass(slots=True)
class Tail:
    """The last rows one read task kept of one lane, as runs of equal ts: with the lane's
    rows in ts order (`LanePiece.ordered`, which `bound` requires), the rows released at a
    mark are a prefix of the piece, so these runs give its release for any mark at or above
    the ts of the row before them (`released_by_tails`) without the rows."""

    topic: str
    partition: int
    source: str
    groups: list[list[Any]] = field(default_factory=list)
    """[ts, first offset, last order key (`okey`)] of each of the last `limit` runs."""
    before: tuple[str, int] | None = None
    """(order key, ts) of the last row before `groups` (None: they hold every row)."""
    limit: int = TAIL_GROUPS

    def add(self, ts: int, offset: int, key: str) -> None:
        """A kept row, in offset order."""
        groups = self.groups
        if groups and groups[-1][0] == ts:
            groups[-1][2] = key
            return
        if len(groups) == self.limit:
            old = groups.pop(0)
            self.before = (old[2], old[0])
        groups.append([ts, offset, key])


def released_by_tails(
    tails: Iterable[Tail], mark: int, next_offsets: Mapping[TopicPartition, int]
) -> Released | None:
    """What the rows of pieces with these tails release at `mark` (what the JVM's aggregate
    over the rows gives: per lane the highest key and ts at or below the mark, per partition
    the first offset of a row above it), or None when the mark falls before a tail (rows
    before it would be held: only the rows can tell)."""
    keys: dict[Lane, str] = {}
    tops: dict[Lane, int] = {}
    held: dict[TopicPartition, int] = {}
    for tail in tails:
        lane, groups = (tail.topic, tail.partition, tail.source), tail.groups
        i = 0
        while i < len(groups) and groups[i][0] <= mark:
            i += 1
        if i:
            got: tuple[str, int] | None = (groups[i - 1][2], groups[i - 1][0])
        elif tail.before is not None and tail.before[1] > mark:
            return None
        else:
            got = tail.before
        if got is not None:
            keys[lane] = max(keys.get(lane, got[0]), got[0])
            tops[lane] = max(tops.get(lane, got[1]), got[1])
        if i < len(groups):
            tp = (tail.topic, tail.partition)
            held[tp] = min(held.get(tp, groups[i][1]), groups[i][1])
    last = {lane: (key_of(k), tops[lane]) for lane, k in keys.items()}
    return Released(last, held, next_offsets)


def bound(
    previous: PlannerState, pieces: Iterable[LanePiece], expected: Collection[Lane]
) -> Bound | str:
    """The release of a batch from its pieces over `previous`, or why the merger must plan it."""
    if previous.stash or previous.spilled:
        return "events held in the sink's stash"
    lanes = previous.expected or tuple(sorted(set(expected)))
    known = set(lanes)
    by_lane: dict[Lane, list[LanePiece]] = {}
    for piece in pieces:
        if piece.lane not in known:
            return f"source {piece.source} is new on {piece.topic}[{piece.partition}]"
        by_lane.setdefault(piece.lane, []).append(piece)
    watermarks = dict(previous.watermarks)
    raised_at = dict(previous.raised_at)
    for lane, found in by_lane.items():
        found.sort(key=lambda p: p.first_offset if p.rows else p.raised_at)
        last: LanePiece | None = None
        for piece in found:
            if piece.watermark > watermarks.get(lane, 0):
                watermarks[lane], raised_at[lane] = piece.watermark, piece.raised_at
            if not piece.rows:
                continue
            if not piece.ordered:
                return f"rows of {lane} out of ts order"
            if last is not None:
                assert last.last_key is not None
                assert piece.first_key is not None
                if piece.first_key <= last.last_key or piece.first_ts < last.last_ts:
                    return f"rows of {lane} repeated across read tasks"
            last = piece
    mark = min((watermarks.get(lane, 0) for lane in lanes), default=0)
    return Bound(mark, watermarks, raised_at, lanes)


def advance(previous: PlannerState, b: Bound, released: Released) -> PlannerState:
    """The state after releasing every kept row at or below `b.mark` (what `planner.plan`
    would store), with the held rows left to be read again (`reread`)."""
    last_seen = dict(previous.last_seen)
    floors = dict(previous.floors)
    ts = previous.ts
    for lane, (key, top) in released.last.items():
        last_seen[lane] = max(last_seen.get(lane, key), key)
        floors[lane[2]] = floors.get(lane[2], Floor()).raised_to(key)
        ts = max(ts, top)
    offsets = dict(previous.offsets)
    for tp, nxt in released.next_offsets.items():
        offsets[tp] = max(offsets.get(tp, 0), nxt)
    return replace(
        previous.copy(),
        expected=b.expected,
        watermarks=dict(b.watermarks),
        raised_at=dict(b.raised_at),
        last_seen=last_seen,
        floors=floors,
        offsets=offsets,
        ts=ts,
        stash=[],
        spilled=(),
        released_through=max(b.mark, previous.released_through),
        reread=dict(released.held),
    )


def reread_span(previous: PlannerState) -> int:
    """Offsets the next batch reads again (held rows and what lies between them)."""
    return sum(max(0, previous.offsets.get(tp, o) - o) for tp, o in previous.reread.items())


def okey(key: PosKey) -> str:
    """An order key as short text that sorts as the key does, for the JVM's max and the write
    tasks' sort (`key_of` inverts): each number as `_number` writes it, the file name after its
    length, so the parts are self-delimiting and text order is tuple order. The file name's
    length comes before the name: keys of one upstream and file number with names of different
    lengths order by length (the reader numbers files from the name, so they share a name
    there). ~20 characters for a usual key (84 fixed-width before 2026-11-26): every row's key
    crosses the JVM through the cache and the shuffle."""
    upstream, number, file, offset, index = key
    return okey_head(upstream, number, file) + okey_tail(offset, index)


def okey_head(upstream: int, number: int, file: str) -> str:
    """What `okey` gives every key of one binlog file of one upstream (the keying tasks make
    it once per file)."""
    return f"{_number(upstream)}{_number(number)}{_number(len(file))}{file}"


def okey_tail(offset: int, index: int) -> str:
    """The rest of `okey` after `okey_head`."""
    return f"{_number(offset)}{_number(index)}"


def _number(n: int) -> str:
    """An integer as text that sorts as the integers do and says where it ends: its digits
    after one character for their count, above ``@`` for n >= 0; for n < 0 (a file number
    of -1) the nines' complement of its digits after a character below ``@`` that falls with
    the count, so a longer negative sorts first."""
    if n >= 0:
        d = str(n)
        return chr(0x40 + len(d)) + d
    d = str(-n)
    return chr(0x3F - len(d)) + d.translate(_NINES)


_NINES = str.maketrans("0123456789", "9876543210")


def key_of(text: str) -> PosKey:
    upstream, at = _read_number(text, 0)
    number, at = _read_number(text, at)
    n, at = _read_number(text, at)
    file, at = text[at : at + n], at + n
    offset, at = _read_number(text, at)
    index, _ = _read_number(text, at)
    return (upstream, number, file, offset, index)


def _read_number(text: str, at: int) -> tuple[int, int]:
    """`_number`'s integer at `at`, and where the text after it starts."""
    c = ord(text[at])
    if c > 0x40:
        n = c - 0x40
        return int(text[at + 1 : at + 1 + n]), at + 1 + n
    n = 0x3F - c
    return -int(text[at + 1 : at + 1 + n].translate(_NINES)), at + 1 + n


def held_by_reread(state: PlannerState, limit: int) -> PlannerState | None:
    """`state` (the merger's, after a batch it planned) with its stash replaced by `reread`:
    per partition the first offset of a held event, read again by the next batch; None when
    that span would exceed `limit` offsets (the stash stays in the sink).

    This is the merge engine's own resume point (`Merger.checkpoint`: resume offsets at the
    heads of what is held, floors at what was released): the sources' floors drop the
    released events read again, and the lanes that hold events forget their last key, so
    the held ones pass again (a copy of one within the re-read is still dropped by the
    running key of its lane). Only for a plan without DDL gates (a shard DDL holds a table's
    transactions out of ts order, which floors cannot express)."""
    if not state.stash and not state.spilled:
        return replace(state.copy(), reread={})
    heads: dict[TopicPartition, int] = {}
    lanes: set[Lane] = set()
    for e in state.stash:
        tp = (e.topic, e.partition)
        heads[tp] = min(heads.get(tp, e.offset), e.offset)
        lanes.add((e.topic, e.partition, e.event.source))
    for txn in state.spilled:
        for r in txn.runs:
            tp = (r.topic, r.partition)
            heads[tp] = min(heads.get(tp, r.head), r.head)
            lanes.add((r.topic, r.partition, txn.source))
    after = replace(state.copy(), stash=[], spilled=(), reread=heads)
    if reread_span(after) > limit:
        return None
    after.last_seen = {k: v for k, v in after.last_seen.items() if k not in lanes}
    return after
