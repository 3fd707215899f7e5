"""Total order of events inside one source, and the floors below which events are dropped.

A `PosKey` (the protocol's order key) orders the events of one source in binlog order. A
`Floor` says which events of a source are already behind the subscriber: at or below a released
position, a start timestamp, or a start GTID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TypeAlias

from rowbus.protocol.events import BinlogPosition, DdlChange, RowChange, order_key

PosKey: TypeAlias = tuple[int, str, int, int]
"""`rowbus.protocol.order_key`: (binlog file number, file name, offset, index in transaction)."""

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL_GTID = re.compile(r"^([0-9a-fA-F-]{36}):(\d+)$")

event_key = order_key


def position_key(position: BinlogPosition, index: int = 0) -> PosKey:
    """The order key an event at `position` (and `index` in its transaction) would have."""
    return (position.file_number, position.file, position.offset, index)


def parse_gtid(gtid: str) -> tuple[str, int]:
    """A GTID as (stream, sequence number): MariaDB ``D-S-N`` → (``D``, N), MySQL ``uuid:N`` →
    (uuid, N). Sequence numbers grow within a stream (a MariaDB domain, a MySQL server uuid)."""
    if match := _MARIADB_GTID.match(gtid):
        return match.group(1), int(match.group(3))
    if match := _MYSQL_GTID.match(gtid):
        return match.group(1).lower(), int(match.group(2))
    raise ValueError(f"{gtid!r} is neither a MariaDB (D-S-N) nor a MySQL (uuid:N) GTID")


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

    def covers(self, event: RowChange | DdlChange, key: PosKey) -> bool:
        """Whether `event` (whose key is `key`) is at or below this floor."""
        if self.position is not None and key <= self.position:
            return True
        if self.ts is not None and event.ts <= self.ts:
            return True
        if self.gtid is not None and event.position.gtid:
            try:
                stream, seq = parse_gtid(event.position.gtid)
            except ValueError:
                return False
            return stream == self.gtid[0] and seq <= self.gtid[1]
        return False

    def raised_to(self, key: PosKey) -> Floor:
        """This floor with its position raised to `key` (never lowered)."""
        if self.position is not None and key <= self.position:
            return self
        return replace(self, position=key)


def parse_gtid_set(text: str | None) -> dict[str, int]:
    """A GTID set as {stream: highest sequence number}: MariaDB ``0-1-42,1-2-7`` or MySQL
    ``uuid:1-42:50-60,uuid2:1-5``; unparsable parts are skipped."""
    out: dict[str, int] = {}
    for raw in (text or "").replace("\n", "").split(","):
        part = raw.strip()
        if not part:
            continue
        if match := _MARIADB_GTID.match(part):
            out[match.group(1)] = max(out.get(match.group(1), 0), int(match.group(3)))
            continue
        uuid, _, ranges = part.partition(":")
        highs = [int(r.rpartition("-")[2]) for r in ranges.split(":") if r.rpartition("-")[2]]
        if uuid and highs:
            out[uuid.lower()] = max(out.get(uuid.lower(), 0), *highs)
    return out
