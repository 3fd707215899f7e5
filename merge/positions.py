"""Total order of events inside one source, and the floors below which events are dropped.

A `PosKey` (the protocol's order key) orders the events of one source in binlog order. A
`Floor` says which events of a source are already behind the subscriber: at or below a released
position, a start timestamp, or a start GTID.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    order_key,
)
from rowbus.protocol.positions import parse_gtid, parse_gtid_set

__all__ = [
    "Floor",
    "PosKey",
    "event_key",
    "key_from_json",
    "parse_gtid",
    "parse_gtid_set",
    "position_key",
]

PosKey: TypeAlias = tuple[int, int, str, int, int]
"""`rowbus.protocol.order_key`: (upstream, binlog file number, file name, offset, index in
transaction)."""

event_key = order_key


def position_key(position: BinlogPosition, index: int = 0) -> PosKey:
    """The order key an event at `position` (and `index` in its transaction) would have."""
    return (position.upstream, position.file_number, position.file, position.offset, index)


def key_from_json(items: Sequence[Any]) -> PosKey:
    """A key stored as a JSON list; one of four items was stored before protocol 1.2 added the
    upstream, which was 0 then."""
    if len(items) == 4:
        items = [0, *items]
    upstream, number, file, offset, index = items
    # Interned: a stored state names the same few binlog files in every held transaction's
    # keys, and JSON parsing makes a string per occurrence.
    return (int(upstream), int(number), sys.intern(str(file)), int(offset), int(index))


@dataclass(frozen=True, slots=True)
class Floor:
    """What of one source is already behind: events at or below it are dropped.

    `position`: the last released event's key; `ts`: a start timestamp (events with ts at or
    below it); `gtid`: a start GTID as (stream, seq) — the transaction with that GTID and the
    earlier ones of its stream.
    """

    position: PosKey | None = None
    ts: int | None = None
    gtid: tuple[str, int] | None = None

    def covers(
        self, event: RowChange | DdlChange | SnapshotBegin | SnapshotEnd, key: PosKey
    ) -> bool:
        """Whether `event` (whose key is `key`) is at or below this floor."""
        return self.covers_at(key, event.ts, event.position.gtid)

    def covers_at(self, key: PosKey, ts: int, gtid: str | None) -> bool:
        """`covers` of an event by its key, ts and GTID (the apply job's keying tasks read
        them from a row's rendered header without building its event)."""
        if self.position is not None and key <= self.position:
            return True
        if self.ts is not None and ts <= self.ts:
            return True
        if self.gtid is not None and gtid:
            try:
                stream, seq = parse_gtid(gtid)
            except ValueError:
                return False
            return stream == self.gtid[0] and seq <= self.gtid[1]
        return False

    def raised_to(self, key: PosKey) -> Floor:
        """This floor with its position raised to `key` (never lowered)."""
        if self.position is not None and key <= self.position:
            return self
        # Once per released transaction: a direct build, not `dataclasses.replace` (~4 µs).
        return Floor(key, self.ts, self.gtid)
