"""Where a subscriber starts: earliest, latest, a timestamp, a GTID or a binlog position.

The positions are resolved through the readers' checkpoints topic, used as an index: each
`ReaderCheckpoint` pairs a source's binlog position, GTID set and ts with the Kafka offsets
right after it. `resolve` picks, per source, the last checkpoint at or before the requested
point, starts its partitions there, and sets the source's `Floor` so events before the point
are dropped. It is pure: the caller reads the index and the partitions' earliest offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rowbus.merge.checkpoint import TopicPartition
from rowbus.merge.exceptions import StartPositionError
from rowbus.merge.positions import Floor, parse_gtid, parse_gtid_set, position_key
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint
from rowbus.protocol.hlc import compose
from rowbus.protocol.positions import parse_start

Kind = Literal["earliest", "latest", "timestamp", "gtid", "position"]


@dataclass(frozen=True)
class StartFrom:
    """A requested start. Build with the static constructors or `parse`."""

    kind: Kind = "earliest"
    timestamp_ms: int | None = None
    source: str | None = None
    gtid: str | None = None
    position: BinlogPosition | None = None

    @staticmethod
    def earliest() -> StartFrom:
        """Everything the data topics still hold."""
        return StartFrom("earliest")

    @staticmethod
    def latest() -> StartFrom:
        """Only what each source commits after its last reader checkpoint."""
        return StartFrom("latest")

    @staticmethod
    def timestamp(ms: int) -> StartFrom:
        """Transactions committed at or after `ms` (milliseconds since the epoch)."""
        return StartFrom("timestamp", timestamp_ms=ms)

    @staticmethod
    def after_gtid(source: str, gtid: str) -> StartFrom:
        """`source`'s transactions after the one with `gtid`; other sources from earliest."""
        parse_gtid(gtid)
        return StartFrom("gtid", source=source, gtid=gtid)

    @staticmethod
    def at_position(source: str, file: str, offset: int) -> StartFrom:
        """`source`'s events at or after binlog ``file:offset``; other sources from earliest."""
        return StartFrom("position", source=source, position=BinlogPosition(file, offset))

    @staticmethod
    def parse(text: str) -> StartFrom:
        """The one start-position grammar (`rowbus.protocol.positions`): ``earliest``,
        ``latest``, ``timestamp:<unix s | ISO date-time>``, ``SOURCE@gtid:<gtid>`` or
        ``SOURCE@file:<binlog file>:<pos>`` (a subscriber spans sources, so a GTID or a binlog
        position names its source)."""
        try:
            start = parse_start(text)
        except ValueError as exc:
            raise StartPositionError(str(exc)) from exc
        if start.kind in ("earliest", "latest"):
            return StartFrom(start.kind)
        if start.kind == "timestamp":
            assert start.timestamp_ms is not None
            return StartFrom.timestamp(start.timestamp_ms)
        if start.source is None:
            raise StartPositionError(
                f"start position {text!r}: a subscriber reads several sources; name the one "
                f"the position belongs to, e.g. source1@{text.strip()}"
            )
        if start.kind == "gtid":
            assert start.gtid_set is not None
            if "," in start.gtid_set:
                raise StartPositionError(
                    f"start position {text!r}: a subscriber starts after one GTID, not a set"
                )
            return StartFrom.after_gtid(start.source, start.gtid_set)
        assert start.file is not None
        assert start.offset is not None
        return StartFrom.at_position(start.source, start.file, start.offset)


def resolve(
    start: StartFrom,
    index: Sequence[ReaderCheckpoint],
    earliest: Mapping[TopicPartition, int],
) -> tuple[dict[TopicPartition, int], dict[str, Floor]]:
    """Start offsets for every partition in `earliest` and the per-source floors.

    `index`: the checkpoints topic in order; `earliest`: each subscribed partition's first
    offset. A partition no chosen checkpoint names starts at its earliest offset (the floors
    drop what is before the point).
    """
    offsets = dict(earliest)
    floors: dict[str, Floor] = {}
    if start.kind == "earliest":
        return offsets, floors
    by_source: dict[str, list[ReaderCheckpoint]] = {}
    for cp in index:
        by_source.setdefault(cp.source, []).append(cp)
    if start.source is not None and start.source not in by_source:
        known = ", ".join(sorted(by_source)) or "none"
        raise StartPositionError(
            f"source {start.source} has no reader checkpoint to start from (known: {known})"
        )
    chosen: dict[str, list[ReaderCheckpoint]] = {}
    for source, cps in by_source.items():
        if start.kind == "latest":
            chosen[source] = cps
            floors[source] = Floor(ts=cps[-1].ts)
        elif start.kind == "timestamp":
            assert start.timestamp_ms is not None
            floor_ts = compose(start.timestamp_ms) - 1
            chosen[source] = [cp for cp in cps if cp.ts <= floor_ts]
            floors[source] = Floor(ts=floor_ts)
        elif source == start.source and start.kind == "gtid":
            assert start.gtid is not None
            stream, seq = parse_gtid(start.gtid)
            chosen[source] = [cp for cp in cps if parse_gtid_set(cp.gtid_set).get(stream, 0) <= seq]
            floors[source] = Floor(gtid=(stream, seq))
        elif source == start.source and start.kind == "position":
            assert start.position is not None
            key = position_key(start.position)
            chosen[source] = [cp for cp in cps if position_key(cp.position) <= key]
            below = start.position.offset - 1
            floors[source] = Floor(position=(key[0], key[1], key[2], below, 2**62))
    for tp, offset in _latest_offsets(by_source, chosen).items():
        if tp in offsets:
            offsets[tp] = max(offsets[tp], offset)
    return offsets, floors


def _latest_offsets(
    by_source: Mapping[str, Iterable[ReaderCheckpoint]],
    chosen: Mapping[str, Iterable[ReaderCheckpoint]],
) -> dict[TopicPartition, int]:
    # Per partition, the offset named by each source's last chosen checkpoint that names it.
    # Where several sources share a partition, the lowest; a partition where some source has
    # no chosen checkpoint is left out (read from its earliest offset), so no source loses events.
    def last(cps: Iterable[ReaderCheckpoint]) -> dict[TopicPartition, int]:
        return {(t, p): o for cp in cps for t, p, o in cp.offsets}

    out: dict[TopicPartition, int] = {}
    on: dict[TopicPartition, set[str]] = {}
    for source, cps in by_source.items():
        for tp in last(cps):
            on.setdefault(tp, set()).add(source)
    for cps in chosen.values():
        for tp, offset in last(cps).items():
            out[tp] = min(out.get(tp, offset), offset)
    return {tp: o for tp, o in out.items() if all(tp in last(chosen.get(s, ())) for s in on[tp])}
