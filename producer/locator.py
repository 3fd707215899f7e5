"""A start position located in the source's binlog: the transaction boundary that
``reader.start`` (or a checkpoint's GTID set on another server) names.

`StartLocator.locate` turns a `StartPosition` into a file/position: ``latest`` and ``earliest``
directly, ``file:pos`` checked, a GTID set or a timestamp by scanning transaction boundaries
(``SHOW BINLOG EVENTS``: the server's own parse, no row decoding) from the last file that can
hold it, a timestamp by binary search over commit times read from a short binlog stream.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rowbus.producer.assembler import TransactionAssembler
from rowbus.producer.binlog import TRANSACTION_EVENTS, BinlogStream
from rowbus.producer.exceptions import BadStartPositionError, ServerMisconfiguredError
from rowbus.producer.start import GtidState, StartPosition, is_mariadb_gtid
from rowbus.producer.tables import TableFilter
from rowbus.protocol.events import BinlogPosition
from rowbus.protocol.positions import parse_gtid_set

if TYPE_CHECKING:
    from rowbus.producer.server import SourceServer

_GTID_INFO = re.compile(
    r"GTID(?:_NEXT)?\W+'?([0-9a-fA-F-]{36}(?::[A-Za-z_][A-Za-z0-9_]*)?:\d+|\d+-\d+-\d+)"
)
"""A GTID event's Info in SHOW BINLOG EVENTS: MariaDB ``BEGIN GTID 0-1-42``, MySQL
``SET @@SESSION.GTID_NEXT= 'uuid:42'`` or, tagged (8.3+), ``'uuid:tag:42'``."""


class StartLocator:
    """Locates start positions in the binlog of the server `server` is connected to."""

    def __init__(self, server: SourceServer) -> None:
        self._server = server
        self._bounds: dict[str, list[tuple[str | None, int, int]]] = {}

    def locate(self, spec: StartPosition, server_id: int) -> BinlogPosition:
        """The transaction boundary a `StartPosition` names (scans the binlog for gtid or time)."""
        self._bounds.clear()
        if spec.kind == "latest":
            file, pos = self._server.master_position()
            return BinlogPosition(file, pos, self._server.gtid_at(file, pos))
        logs = self._server.binary_logs()
        if not logs:
            raise ServerMisconfiguredError(f"{self._server.where}: no binary logs; set --log-bin")
        if spec.kind == "earliest":
            return BinlogPosition(logs[0][0], 4, None)
        if spec.kind == "file":
            assert spec.file is not None
            assert spec.offset is not None
            position = BinlogPosition(spec.file, spec.offset, None)
            self._server.ensure_available(position, "start position")
            gtid = self._server.gtid_at(spec.file, spec.offset)
            return BinlogPosition(spec.file, spec.offset, gtid)
        names = [name for name, _ in logs]
        if spec.kind == "gtid":
            first = self._file_before_gtid(names, _gtid_targets(spec.gtid_set or ""))
        else:
            first = self._file_before_time(names, spec.timestamp_s or 0, server_id)
        return self._scan(spec, first, server_id)

    def _file_before_gtid(self, names: list[str], targets: set[str]) -> str:
        """The last binlog file whose starting GTID state lacks one of `targets` (MariaDB;
        elsewhere the oldest file)."""
        if not self._server.mariadb or not all(is_mariadb_gtid(t) for t in targets):
            return names[0]
        for name in reversed(names):
            state = GtidState(self._server.gtid_at(name, 4))
            if not all(state.contains(t) for t in targets):
                return name
        return names[0]

    def _file_before_time(self, names: list[str], timestamp: int, server_id: int) -> str:
        """The last binlog file whose first transaction committed before `timestamp`."""
        for name in reversed(names):
            bounds = self.boundaries(name)
            if bounds and self._commit_time(name, bounds[0][1], server_id) < timestamp:
                return name
        return names[0]

    def boundaries(self, name: str) -> list[tuple[str | None, int, int]]:
        """(gtid, start, end) of every transaction in binlog file `name`, from the server's own
        parse (``SHOW BINLOG EVENTS``: no row decoding). Cached during one `locate`."""
        cached = self._bounds.get(name)
        if cached is not None:
            return cached
        out: list[tuple[str | None, int, int]] = []
        gtid: str | None = None
        start: int | None = None
        standalone = False
        opened = False
        events = self._server.query_all(f"SHOW BINLOG EVENTS IN '{name}'")
        for _, pos, raw_kind, _, end, raw_info in events:
            kind, info = str(raw_kind), str(raw_info or "")
            if kind in ("Gtid", "Gtid_tagged"):
                m = _GTID_INFO.search(info)
                gtid = m.group(1).lower() if m else None  # as `_gtid_targets` spells them
                start = int(pos)
                # An XA group opens like BEGIN and ends at its XA_prepare event.
                opened = info.startswith(("BEGIN", "XA START"))
                standalone = not opened and self._server.mariadb
                continue
            if start is None and kind not in ("Query", "Xid"):
                continue
            head = info.lstrip()[:8].upper()
            if kind == "Query" and head.startswith("BEGIN"):
                opened = True
                start = int(pos) if start is None else start
                continue
            head = info.lstrip()[:12].upper()
            # A compressed MySQL transaction is its GTID and one Transaction_payload event.
            closes = kind in ("Xid", "XA_prepare", "Transaction_payload") or (
                kind == "Query"
                and not head.startswith(("ROLLBACK TO", "SAVEPOINT", "XA END"))
                and (head.startswith(("COMMIT", "ROLLBACK")) or standalone or not opened)
            )
            if closes and start is not None:
                out.append((gtid, start, int(end)))
                gtid, start, opened, standalone = None, None, False, False
        self._bounds[name] = out
        return out

    def _commit_time(self, name: str, pos: int, server_id: int) -> int:
        """The commit time of the transaction starting at `name:pos` (reads it from the stream)."""
        stream = self._stream(name, pos, server_id)
        assembler = TransactionAssembler(name, pos)
        try:
            for event in stream.events():
                txn = assembler.feed(event)
                if txn is not None:
                    return txn.commit_time
        finally:
            stream.close()
        return 2**62

    def _stream(self, name: str, pos: int, server_id: int) -> BinlogStream:
        return BinlogStream(
            self._server.source,
            server_id,
            name,
            pos,
            TableFilter(system_schemas=["*"]),
            blocking=False,
            only_events=TRANSACTION_EVENTS,
        )

    def _scan(self, spec: StartPosition, first: str, server_id: int) -> BinlogPosition:
        """Walk transaction boundaries from file `first` on (binary search for a timestamp)."""
        names = [n for n, _ in self._server.binary_logs()]
        files = names[names.index(first) :] if first in names else names
        if spec.kind == "gtid":
            targets = _gtid_targets(spec.gtid_set or "")
            for name in files:
                for gtid, _, end in self.boundaries(name):
                    if gtid in targets:
                        targets.discard(gtid)
                        if not targets:
                            at = self._server.gtid_at(name, end) or gtid
                            return BinlogPosition(name, end, at)
            raise BadStartPositionError(
                f"{self._server.where}: GTID {spec.gtid_set} is not in the binlog (oldest file "
                f"{first}); start from earliest, latest or a file:pos instead"
            )
        timestamp = spec.timestamp_s or 0
        for index, name in enumerate(files):
            bounds = self.boundaries(name)
            if not bounds or self._commit_time(name, bounds[-1][1], server_id) < timestamp:
                continue
            lo, hi = 0, len(bounds) - 1  # first transaction committed at or after timestamp
            for _ in range(64):
                if lo >= hi:
                    break
                mid = (lo + hi) // 2
                if self._commit_time(name, bounds[mid][1], server_id) < timestamp:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > 0:
                pos = bounds[lo - 1][2]
            elif index > 0 or name != names[0]:
                pos = bounds[0][1]
            else:
                return BinlogPosition(name, 4, None)
            return BinlogPosition(name, pos, self._server.gtid_at(name, pos))
        file, pos = self._server.master_position()
        return BinlogPosition(file, pos, self._server.gtid_at(file, pos))


def _gtid_targets(gtid_set: str) -> set[str]:
    """The GTIDs whose transactions must be passed: each MariaDB GTID, or for a MySQL set
    ``uuid:1-42`` its last transaction ``uuid:42`` (per tag: ``uuid:1-42:tag:1-5`` also
    ``uuid:tag:5``)."""
    out: set[str] = set()
    for raw in gtid_set.split(","):
        part = raw.strip()
        if not part:
            continue
        if is_mariadb_gtid(part):
            out.add(part)
            continue
        streams = parse_gtid_set(part)
        if not streams:
            raise BadStartPositionError(f"GTID set {gtid_set!r} is malformed")
        out.update(f"{stream}:{last}" for stream, last in streams.items())
    return out
