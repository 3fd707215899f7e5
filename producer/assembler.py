"""The transaction assembler: binlog events in, whole transactions with positions out (pure).

The binlog seam (`rowbus.producer.binlog`) turns mysql-replication's events into the small values
below; `TransactionAssembler.feed` returns a `Transaction` each time one ends:

- MariaDB: a GTID event opens a group; a *standalone* one (DDL) is closed by its single query,
  others by an XID (transactional tables) or a ``COMMIT`` query (non-transactional tables).
- MySQL: a GTID event names the next group; ``BEGIN`` opens it, XID/``COMMIT`` closes it; a DDL
  query outside ``BEGIN`` is a transaction of its own.

A transaction's `end` is the position *after* its last event, tagged with its GTID: the only
kind of position the reader checkpoints and resumes from, so a resume never starts inside a
transaction. `event_end` is the end of the last event of any kind, which is what the server's
heartbeat reports when the reader is caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from rowbus.protocol.ddl import DdlKind, DdlParseError, ParsedDdl, is_transaction_control, parse_ddl
from rowbus.protocol.events import BinlogPosition, Op, TableSchema
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

Image = tuple[Value, ...]

# ---- binlog events, as the seam hands them over -------------------------------------------


@dataclass(frozen=True, slots=True)
class Rotate:
    """The stream moved to `file` (at `pos`)."""

    file: str
    pos: int


@dataclass(frozen=True, slots=True)
class GtidMark:
    """A GTID event ending at `end`; `standalone` (MariaDB) means no BEGIN/COMMIT follows."""

    gtid: str
    end: int
    size: int
    standalone: bool
    opens: bool
    """True when the GTID event itself opens the group (MariaDB); MySQL waits for BEGIN."""


@dataclass(frozen=True, slots=True)
class Query:
    """A query event: BEGIN/COMMIT/ROLLBACK or a DDL statement."""

    statement: str
    schema: str
    end: int
    size: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Rows:
    """A rows event of a wanted table; `decode()` yields (before, after) images (lazy)."""

    op: Op
    table: TableSchema
    end: int
    decode: Callable[[], list[tuple[Image | None, Image | None]]]


@dataclass(frozen=True, slots=True)
class Skipped:
    """Any other event (table map, a rows event of an unwanted table, ...) ending at `end`."""

    end: int


@dataclass(frozen=True, slots=True)
class Xid:
    """The commit of a transactional group."""

    end: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ServerHeartbeat:
    """The server has nothing newer than `file:pos` to send."""

    file: str
    pos: int


BinlogEvent = Rotate | GtidMark | Query | Rows | Skipped | Xid | ServerHeartbeat

# ---- what comes out -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowItem:
    op: Op
    table: TableSchema
    before: Image | None
    after: Image | None
    position: BinlogPosition


@dataclass(frozen=True, slots=True)
class DdlItem:
    statement: str
    schema: str
    parsed: ParsedDdl
    position: BinlogPosition


Change = RowItem | DdlItem


@dataclass(slots=True)
class Transaction:
    """One upstream transaction, whole: `changes` in binlog order, `end` where to resume after
    it, `commit_time` in Unix seconds (the server's clock)."""

    id: str
    gtid: str | None
    end: BinlogPosition
    commit_time: int
    changes: list[Change] = field(default_factory=list)


@dataclass(slots=True)
class _Open:
    gtid: str | None
    begin: int
    file: str
    changes: list[Change]


class TransactionAssembler:
    """Feeds on binlog events, returns each transaction when its last event arrives.

    `ddl_wanted(schema, target)` filters DDL statements (rows arrive already filtered).
    """

    def __init__(
        self,
        file: str,
        pos: int,
        ddl_wanted: Callable[[str, ParsedDdl], bool] = lambda schema, parsed: True,
    ) -> None:
        self.file = file
        self.event_end = pos
        self._ddl_wanted = ddl_wanted
        self._gtid: GtidMark | None = None
        self._open: _Open | None = None
        self.last_gtid: str | None = None

    @property
    def in_transaction(self) -> bool:
        """Whether a group is open (its events seen, its end not yet)."""
        return self._open is not None or self._gtid is not None

    @property
    def event_position(self) -> BinlogPosition:
        """End of the last event seen, of any kind."""
        return BinlogPosition(self.file, self.event_end)

    def feed(self, event: BinlogEvent) -> Transaction | None:
        match event:
            case Rows(op=op, table=table, end=end, decode=decode):
                self.event_end = end
                txn = self._ensure_open(end)
                pos = BinlogPosition(self.file, end, txn.gtid)
                txn.changes.extend(RowItem(op, table, b, a, pos) for b, a in decode())
                return None
            case Xid(end=end, timestamp=ts):
                self.event_end = end
                return self._close(end, ts)
            case Query():
                self.event_end = event.end
                return self._query(event)
            case GtidMark():
                self.event_end = event.end
                if self._open is not None:
                    log.warning(
                        "binlog %s:%s: GTID %s starts while a transaction is open; "
                        "dropping its unfinished events",
                        self.file,
                        event.end,
                        event.gtid,
                    )
                    self._open = None
                self._gtid = event
                if event.opens and not event.standalone:
                    self._start(event.end - event.size)
                return None
            case Skipped(end=end):
                if end:
                    self.event_end = end
                return None
            case Rotate(file=file, pos=pos):
                self.file = file
                self.event_end = pos
                return None
            case ServerHeartbeat():
                return None
        raise TypeError(f"not a binlog event: {event!r}")  # pragma: no cover

    def _start(self, begin: int) -> _Open:
        gtid = self._gtid.gtid if self._gtid is not None else None
        self._open = _Open(gtid, begin, self.file, [])
        return self._open

    def _ensure_open(self, end: int) -> _Open:
        if self._open is None:
            # Rows without BEGIN (should not happen): a group of its own.
            return self._start(end)
        return self._open

    def _close(self, end: int, timestamp: int) -> Transaction | None:
        txn = self._open
        self._open = None
        mark, self._gtid = self._gtid, None
        if txn is None:
            if mark is None:
                return None
            txn = _Open(mark.gtid, mark.end - mark.size, self.file, [])
        if txn.gtid is not None:
            self.last_gtid = txn.gtid
        tid = txn.gtid or f"{txn.file}:{txn.begin}"
        return Transaction(
            tid, txn.gtid, BinlogPosition(self.file, end, txn.gtid), timestamp, txn.changes
        )

    def _query(self, q: Query) -> Transaction | None:
        control = is_transaction_control(q.statement)
        if control == "BEGIN":
            if self._open is None:
                self._start(q.end - q.size)
            return None
        if control in ("COMMIT", "ROLLBACK"):
            return self._close(q.end, q.timestamp)
        if control == "XA":
            return None
        try:
            target = parse_ddl(q.statement, q.schema)
        except DdlParseError:
            # A table statement whose names cannot be read: published as OTHER, never lost.
            target = ParsedDdl(DdlKind.OTHER)
        if self._open is not None:
            # A statement inside an open group (rare in ROW format): keep it, the group goes on.
            if self._ddl_wanted(q.schema, target):
                pos = BinlogPosition(self.file, q.end, self._open.gtid)
                self._open.changes.append(DdlItem(q.statement, q.schema, target, pos))
            return None
        txn = self._start(q.end - q.size)
        if self._ddl_wanted(q.schema, target):
            pos = BinlogPosition(self.file, q.end, txn.gtid)
            txn.changes.append(DdlItem(q.statement, q.schema, target, pos))
        return self._close(q.end, q.timestamp)
