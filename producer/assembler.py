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
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rowbus.producer.exceptions import CorruptBinlogError, ServerMisconfiguredError
from rowbus.producer.tracker import DdlSchema
from rowbus.producer.txn_control import TxnControl, TxnControlStatement, classify
from rowbus.protocol.ddl import (
    DdlKind,
    DdlParseError,
    ParsedDdl,
    TableName,
    parse_ddl,
    written_tables,
)
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
    ddl: DdlSchema | None = None
    """What the schema tracker says of a DDL statement (None: not tracked)."""
    sql_mode: str | None = None
    """The session's sql_mode as the server names it (a statement that is not control only;
    None: unknown)."""
    timestamp_us: int | None = None
    """The statement's time at the source, µs since the epoch (None: unknown)."""
    time_zone: str | None = None
    """The session's UTC offset at that time, ``+HH:MM`` (None: unknown)."""


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
class XaPrepare:
    """An XA transaction was prepared: its group ends here, its commit comes later."""

    end: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ServerHeartbeat:
    """The server has nothing newer than `file:pos` to send."""

    file: str
    pos: int


BinlogEvent = Rotate | GtidMark | Query | Rows | Skipped | Xid | XaPrepare | ServerHeartbeat

# ---- what comes out -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowItem:
    op: Op
    table: TableSchema
    before: Image | None
    after: Image | None
    position: BinlogPosition
    start: int | None = None
    """Where the rows event holding this row begins (the end of the event before it), when
    known: Debezium's ``source.pos`` (`rowbus.producer.debezium`)."""


@dataclass(frozen=True, slots=True)
class DdlItem:
    statement: str
    schema: str
    parsed: ParsedDdl
    position: BinlogPosition
    after: DdlSchema | None = None
    """The schema tracker's after-schema (None, or not `known`: the next table map's)."""
    sql_mode: str | None = None
    timestamp_us: int | None = None
    time_zone: str | None = None
    start: int | None = None
    """Where the statement's query event begins (Debezium's ``source.pos``; None: unknown)."""


Change = RowItem | DdlItem


def _ddl_item(q: Query, parsed: ParsedDdl, pos: BinlogPosition, start: int) -> DdlItem:
    return DdlItem(
        q.statement,
        q.schema,
        parsed,
        pos,
        q.ddl,
        q.sql_mode,
        q.timestamp_us,
        q.time_zone,
        start,
    )


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
    safe: BinlogPosition
    """The last transaction end before this group: where a resume re-reads it whole."""
    savepoints: list[tuple[str, int]] = field(default_factory=list)
    xid: str | None = None
    segments: int = 0
    """Parts already handed out (a DDL inside a group is a transaction of its own)."""


@dataclass(slots=True)
class _Prepared:
    """An XA transaction prepared but not yet committed: held until its ``XA COMMIT``."""

    gtid: str | None
    changes: list[Change]
    hold: BinlogPosition
    prepared_at: BinlogPosition
    timestamp: int
    """The prepare's binlog timestamp (seconds since the epoch, the server's clock)."""


@dataclass(frozen=True, slots=True)
class PreparedXa:
    """An XA transaction held prepared: every checkpoint resumes at `hold` until it ends."""

    xid: str
    gtid: str | None
    hold: BinlogPosition
    """Where its group begins (what every checkpoint written meanwhile resumes at)."""
    prepared_at: BinlogPosition
    """The end of its ``XA PREPARE`` event."""
    timestamp: int
    """When it was prepared: the binlog timestamp, seconds since the epoch."""


class TransactionAssembler:
    """Feeds on binlog events, returns each transaction when its last event arrives.

    `ddl_wanted(schema, target)` filters DDL statements (rows arrive already filtered).

    Shapes (PROTOCOL.md "Transaction shapes"): savepoints are not changes (``ROLLBACK TO``
    drops the changes after its savepoint, as a replica does); a DDL inside a group (CREATE
    TABLE … SELECT) is a transaction of its own before the rows; an XA transaction is held from
    its prepare to its ``XA COMMIT`` and comes out there, in commit order, with the commit's
    position and GTID (an ``XA ROLLBACK`` drops it). While one is held, every transaction
    handed out ends (`Transaction.end`, the resume point) where the held one began, so a
    restart reads it again; what it re-reads after it is published again with the same
    positions, which consumers drop as duplicates.
    """

    def __init__(
        self,
        file: str,
        pos: int,
        ddl_wanted: Callable[[str, ParsedDdl], bool] = lambda schema, parsed: True,
        upstream: int = 0,
    ) -> None:
        self.file = file
        self.upstream = upstream
        """Stamped on every position (PROTOCOL.md §9.4)."""
        self.event_end = pos
        self._query_start = pos
        """Where the last query event began (the end of the event before it)."""
        self._ddl_wanted = ddl_wanted
        self._gtid: GtidMark | None = None
        self._open: _Open | None = None
        self._safe = BinlogPosition(file, pos, upstream=upstream)
        self._prepared: dict[str, _Prepared] = {}
        self._timestamp = 0
        self.last_gtid: str | None = None

    def _at(self, end: int, gtid: str | None = None) -> BinlogPosition:
        return BinlogPosition(self.file, end, gtid, self.upstream)

    @property
    def in_transaction(self) -> bool:
        """Whether a group is open (its events seen, its end not yet)."""
        return self._open is not None or self._gtid is not None

    @property
    def open_size(self) -> int:
        """Changes of the open group gathered (and not taken) so far."""
        return len(self._open.changes) if self._open is not None else 0

    def take_open(self) -> tuple[str, str | None, list[Change]]:
        """Hand out the changes of the open group gathered so far; the group stays open and
        its transaction later holds only the changes gathered after this (a reader publishes a
        huge transaction in fragments: `rowbus.producer.fragments`)."""
        txn = self._open
        assert txn is not None
        changes, txn.changes = txn.changes, []
        return txn.gtid or f"{txn.file}:{txn.begin}", txn.gtid, changes

    @property
    def event_position(self) -> BinlogPosition:
        """End of the last event seen, of any kind."""
        return self._at(self.event_end)

    @property
    def prepared(self) -> int:
        """XA transactions prepared and not yet committed or rolled back."""
        return len(self._prepared)

    def held_xa(self) -> list[PreparedXa]:
        """The XA transactions prepared and not yet committed or rolled back, oldest first."""
        held = [
            PreparedXa(xid, p.gtid, p.hold, p.prepared_at, p.timestamp)
            for xid, p in self._prepared.items()
        ]
        return sorted(held, key=lambda x: _order(x.hold))

    def feed(self, event: BinlogEvent) -> Transaction | None:
        match event:
            case Rows(op=op, table=table, end=end, decode=decode):
                start, self.event_end = self.event_end, end
                txn = self._ensure_open(end)
                ready = self._cut(txn) if _only_ddl(txn.changes) else None
                pos = self._at(end, txn.gtid)
                txn.changes.extend(
                    RowItem(op, table, b, a, pos, start) for b, a in _decoded(decode, pos, table)
                )
                return ready
            case Xid(end=end, timestamp=ts):
                self.event_end = end
                self._timestamp = ts
                return self._close(end, ts)
            case XaPrepare(end=end, timestamp=ts):
                self.event_end = end
                return self._prepare(end, ts)
            case Query():
                self._query_start, self.event_end = self.event_end, event.end
                self._timestamp = event.timestamp
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
        self._open = _Open(gtid, begin, self.file, [], self._safe)
        return self._open

    def _ensure_open(self, end: int) -> _Open:
        if self._open is None:
            # Rows without BEGIN (should not happen): a group of its own.
            return self._start(end)
        return self._open

    def _resume_point(self, end: BinlogPosition) -> BinlogPosition:
        """`end`, or where the oldest held XA transaction began when one is held."""
        if not self._prepared:
            return end
        return min((p.hold for p in self._prepared.values()), key=_order)

    def _tid(self, txn: _Open) -> str:
        tid = txn.gtid or f"{txn.file}:{txn.begin}"
        return tid if txn.segments == 0 else f"{tid}#{txn.segments}"

    def _cut(self, txn: _Open) -> Transaction | None:
        """Hand out what the open group holds so far as a transaction of its own (a DDL, or
        the rows before one); it resumes at the group's start, so a restart reads it again."""
        if not txn.changes:
            return None
        out = Transaction(
            self._tid(txn), txn.gtid, self._resume_point(txn.safe), self._timestamp, txn.changes
        )
        txn.segments += 1
        txn.changes = []
        txn.savepoints = []
        return out

    def _close(self, end: int, timestamp: int) -> Transaction | None:
        txn = self._open
        self._open = None
        mark, self._gtid = self._gtid, None
        if txn is None:
            if mark is None:
                return None
            txn = _Open(mark.gtid, mark.end - mark.size, self.file, [], self._safe)
        if txn.gtid is not None:
            self.last_gtid = txn.gtid
        real_end = self._at(end, txn.gtid)
        self._safe = real_end
        return Transaction(
            self._tid(txn), txn.gtid, self._resume_point(real_end), timestamp, txn.changes
        )

    def _prepare(self, end: int, timestamp: int) -> Transaction | None:
        txn = self._open
        if txn is None or txn.xid is None:
            log.warning("binlog %s:%s: XA PREPARE without an open XA group", self.file, end)
            return self._close(end, timestamp)
        self._open = None
        self._gtid = None
        if txn.gtid is not None:
            self.last_gtid = txn.gtid
        self._safe = self._at(end, txn.gtid)
        self._prepared[txn.xid] = _Prepared(txn.gtid, txn.changes, txn.safe, self._safe, timestamp)
        log.info("binlog %s:%s: XA %s prepared; held until it commits", self.file, end, txn.xid)
        # Nothing to publish yet; an empty transaction keeps positions and GTIDs moving.
        return Transaction(
            f"{txn.gtid or f'{txn.file}:{txn.begin}'}:prepare",
            txn.gtid,
            self._resume_point(self._safe),
            timestamp,
            [],
        )

    def _xa_finish(self, q: Query, xid: str, commit: bool) -> Transaction | None:
        prepared = self._prepared.pop(xid, None)
        if self._open is None:
            self._start(q.end - q.size)
        txn = self._open
        assert txn is not None
        if prepared is None:
            if commit:
                log.warning(
                    "binlog %s:%s: XA COMMIT %s of a transaction prepared before this reader's "
                    "start position: its rows are not in the stream",
                    self.file,
                    q.end,
                    xid,
                )
        elif commit:
            # Published now, in commit order, at the commit's position and GTID: consumers
            # order and de-duplicate by position, and the prepare lies behind what they saw.
            pos = self._at(q.end, txn.gtid)
            txn.changes = [replace(c, position=pos) for c in prepared.changes]
        return self._close(q.end, q.timestamp)

    def _query(self, q: Query) -> Transaction | None:
        control = classify(q.statement)
        if control is not None:
            return self._control(q, control)
        written = written_tables(q.statement, q.schema)
        if written is not None:
            return self._statement_change(q, written)
        try:
            target = parse_ddl(q.statement, q.schema)
        except DdlParseError:
            # A table statement whose names cannot be read: published as OTHER, never lost.
            target = ParsedDdl(DdlKind.OTHER)
        wanted = self._ddl_wanted(q.schema, target)
        if self._open is not None:
            # A DDL inside a group (CREATE TABLE … SELECT): a transaction of its own, before
            # the rows that follow it (consumers apply a DDL at its own barrier).
            if not wanted:
                return None
            txn = self._open
            ready = self._cut(txn)
            pos = self._at(q.end, txn.gtid)
            txn.changes.append(_ddl_item(q, target, pos, self._query_start))
            return ready
        txn = self._start(q.end - q.size)
        if wanted:
            pos = self._at(q.end, txn.gtid)
            txn.changes.append(_ddl_item(q, target, pos, self._query_start))
        return self._close(q.end, q.timestamp)

    def _statement_change(self, q: Query, written: tuple[TableName, ...]) -> Transaction | None:
        """A data change logged as a statement (INSERT, UPDATE, DELETE, LOAD DATA … under
        binlog_format STATEMENT or MIXED): no rows event carries its rows. On a table the reader
        reads it stops the reader; on the others it is nothing to publish (it is no DDL)."""
        if self._ddl_wanted(q.schema, ParsedDdl(DdlKind.OTHER, written)):
            gtid = self._open.gtid if self._open is not None else None
            where = f"{self.file}:{q.end}" + (f" (gtid {gtid})" if gtid else "")
            names = ", ".join(map(str, written)) or "its tables"
            raise ServerMisconfiguredError(
                f"{where}: a change logged as a statement, not as rows: {q.statement[:120]!r}; "
                "the writing session ran with binlog_format=STATEMENT or MIXED, and rowbus "
                "publishes row events only; set binlog_format=ROW globally and for every "
                f"session, then add {names} to reader.exclude_tables for one restart and take "
                "them out again: they are snapshotted anew (README: Row images)"
            )
        if self._open is not None:
            return None  # the group's commit ends it
        self._start(q.end - q.size)
        return self._close(q.end, q.timestamp)

    def _control(self, q: Query, control: TxnControlStatement) -> Transaction | None:
        txn = self._open
        match control.kind:
            case TxnControl.BEGIN | TxnControl.XA_START:
                if txn is None:
                    self._start(q.end - q.size)
                return None
            case TxnControl.COMMIT | TxnControl.ROLLBACK:
                # A ROLLBACK ending a group: what it holds are writes to non-transactional
                # tables, which stay (the server dropped the transactional ones already).
                return self._close(q.end, q.timestamp)
            case TxnControl.XA_COMMIT_ONE_PHASE:
                if txn is not None and txn.xid in (None, control.name):
                    return self._close(q.end, q.timestamp)
                return self._xa_finish(q, control.name, commit=True)
            case TxnControl.XA_COMMIT | TxnControl.XA_ROLLBACK:
                return self._xa_finish(q, control.name, commit=control.kind is TxnControl.XA_COMMIT)
            case TxnControl.XA_END | TxnControl.XA_PREPARE:
                if txn is not None:
                    txn.xid = control.name
                return None
            case TxnControl.SAVEPOINT:
                if txn is not None:
                    txn.savepoints = [s for s in txn.savepoints if s[0] != control.name]
                    txn.savepoints.append((control.name, len(txn.changes)))
                return None
            case TxnControl.ROLLBACK_TO | TxnControl.RELEASE:
                if txn is None:
                    return None
                names = [s[0] for s in txn.savepoints]
                if control.name not in names:
                    log.warning(
                        "binlog %s:%s: %s of an unknown savepoint %s (cut by a DDL?); ignored",
                        self.file,
                        q.end,
                        control.kind.value,
                        control.name,
                    )
                    return None
                at = names.index(control.name)
                if control.kind is TxnControl.ROLLBACK_TO:
                    # As a replica does: the changes after the savepoint are undone.
                    del txn.changes[txn.savepoints[at][1] :]
                    del txn.savepoints[at + 1 :]
                else:
                    del txn.savepoints[at:]
                return None
        return None  # pragma: no cover


def _only_ddl(changes: list[Change]) -> bool:
    return bool(changes) and all(isinstance(c, DdlItem) for c in changes)


def _order(pos: BinlogPosition) -> tuple[int, str, int]:
    return (pos.file_number, pos.file, pos.offset)


def _decoded(
    decode: Callable[[], list[tuple[Image | None, Image | None]]],
    pos: BinlogPosition,
    table: TableSchema,
) -> list[tuple[Image | None, Image | None]]:
    """A rows event's images; bytes that do not read as their column's type (a string that is
    not valid in the charset the table map names, a truncated image) stop the reader in one
    line at the event instead of ending its thread on a bare decoding error."""
    try:
        return decode()
    except (UnicodeDecodeError, IndexError, struct.error) as exc:
        raise CorruptBinlogError(
            f"{pos}: {table.qualified}: a row image cannot be read ({type(exc).__name__}: "
            f"{exc}); compare the table's column types and character sets on the source "
            "(SHOW CREATE TABLE) with the event (mysqlbinlog --verbose at this position)"
        ) from None
