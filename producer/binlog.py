"""The seam around mysql-replication: a binlog stream in file/position mode, as assembler events.

Why file/position mode and not GTID mode. mysql-replication's MariaDB GTID mode has three traps
(see notes/ENVIRONMENT.md): its COM_BINLOG_DUMP packet declares a wrong length (the server
resets the stream at the end of a backlog), its automatic reconnect restarts from the *original*
GTID, and with ``is_mariadb=True`` it ignores log_file/log_pos. In file/position mode the dump
packet is right, the same code serves MySQL and MariaDB, and the library still sets
``@mariadb_slave_capability=4`` so MariaDB sends its real GTID events: every transaction still
carries its GTID. The reader tracks the position itself (transaction ends only, see
`rowbus.producer.assembler`); a GTID start position is turned into a file/position by a scan
(`rowbus.producer.server.locate`).

The one patch: the library reconnects by itself when the stream drops (2006/2013), from *its*
idea of the position, which can be inside a transaction. `_GuardedConnect` refuses every stream
connection after the first, so a drop surfaces as `SourceUnavailableError` and the reader builds
a new stream from the last transaction end it tracked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbBinLogCheckPointEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    NotImplementedEvent,
    PreviousGtidsEvent,
    QueryEvent,
    RotateEvent,
    StopEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer import fastrows, tablemaps
from rowbus.producer.assembler import (
    BinlogEvent,
    GtidMark,
    Query,
    Rotate,
    Rows,
    ServerHeartbeat,
    Skipped,
    XaPrepare,
    Xid,
)
from rowbus.producer.control import classify
from rowbus.producer.exceptions import (
    PositionPurgedError,
    ReaderError,
    ServerMisconfiguredError,
    SourceUnavailableError,
)
from rowbus.producer.tables import (
    Converter,
    MissingMetadataError,
    TableFilter,
    converter_for,
    table_schema_from_map,
)
from rowbus.producer.tracker import DdlSchema, PositionKey, SchemaTracker
from rowbus.producer.values import UnsupportedCharsetError, install, reader_for
from rowbus.protocol.ddl import DdlParseError, parse_ddl
from rowbus.protocol.events import BinlogPosition, Op, TableSchema

log = logging.getLogger(__name__)
install()  # our value layer decodes the column types the library gets wrong
tablemaps.install()  # table maps parsed once per table id and layout

TRANSACTION_PAYLOAD_EVENT = 40
"""MySQL 8's compressed transaction (binlog_transaction_compression=ON): the library cannot
read the events inside it, so a reader that skipped it would lose their rows."""
COMPRESSION_REFUSED = (
    "binlog_transaction_compression=ON on the source: its transactions arrive compressed "
    "(Transaction_payload events) and this reader cannot read them; set "
    "binlog_transaction_compression=OFF"
)
MARIADB_COMPRESSED_EVENTS = frozenset(range(165, 172))
"""MariaDB's QUERY_COMPRESSED_EVENT and *_ROWS_COMPRESSED_EVENT(_V1), written with
log_bin_compress=ON: the library cannot read them."""
MARIADB_COMPRESSION_REFUSED = (
    "log_bin_compress=ON on the source: its row events arrive compressed and this reader "
    "cannot read them; set log_bin_compress=OFF"
)
PARTIAL_JSON_REFUSED = (
    "binlog_row_value_options=PARTIAL_JSON on the source: updates carry JSON diffs, not whole "
    "values; set binlog_row_value_options='' (empty)"
)

MARIADB_FL_STANDALONE = 0x01
ER_MASTER_FATAL_READING_BINLOG = 1236
TRANSACTION_EVENTS = [
    RotateEvent,
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
]
"""Enough to find transaction boundaries (rows events are then skipped unparsed)."""
_EVENTS = [
    RotateEvent,
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    TableMapEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    HeartbeatLogEvent,
    # Read only to keep the position exact (the server's heartbeat reports the end of these).
    FormatDescriptionEvent,
    MariadbGtidListEvent,
    MariadbBinLogCheckPointEvent,
    PreviousGtidsEvent,
    StopEvent,
    # Read only to refuse them: rows a reader cannot reproduce must stop it, never be skipped.
    PartialUpdateRowsEvent,
    NotImplementedEvent,
]


class _ReconnectRefused(Exception):  # noqa: N818 - control flow inside this module
    """The library tried to reconnect the stream by itself."""


class _GuardedConnect:
    """`pymysql_wrapper` that allows one stream connection; control connections pass."""

    def __init__(self) -> None:
        self.stream_connections = 0

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection[Any]:
        if "cursorclass" not in kwargs:  # the ctl connection sets a DictCursor
            self.stream_connections += 1
            if self.stream_connections > 1:
                raise _ReconnectRefused
        return mysql.connect(**kwargs)


def translate_mysql_error(exc: BaseException, where: str) -> ReaderError:
    """One `ReaderError` for a pymysql (or library) failure at `where`."""
    if isinstance(exc, _ReconnectRefused):
        return SourceUnavailableError(f"{where}: the replication stream dropped")
    args: list[Any] = list(getattr(exc, "args", ()))
    code = args[0] if args and isinstance(args[0], int) else None
    text = str(args[1]) if len(args) > 1 else str(exc)
    if code == ER_MASTER_FATAL_READING_BINLOG:
        if "purged" in text or "first log file" in text or "not find" in text.lower():
            return PositionPurgedError(f"{where}: the server no longer has it ({text})")
        return SourceUnavailableError(f"{where}: the server stopped the stream ({text})")
    if mysql.classify(exc) is mysql.Kind.DENIED:
        return ServerMisconfiguredError(f"{where}: access denied ({text}); {GRANT_HINT}")
    return SourceUnavailableError(f"{where}: {type(exc).__name__} {code or ''} {text}".strip())


GRANT_HINT = "grant the reader's user REPLICATION SLAVE, BINLOG MONITOR (MySQL: REPLICATION CLIENT)"

_OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE}


class BinlogStream:
    """One replication connection from `file:pos` on; `events()` yields assembler events.

    Lifecycle: construct (no I/O), `events()` connects on first use, `close()` releases. A
    stream is never reconnected: on any drop it raises `SourceUnavailableError` and the caller
    builds a new one from its own last transaction end.
    """

    def __init__(
        self,
        source: SourceConnection,
        server_id: int,
        file: str,
        pos: int,
        table_filter: TableFilter,
        heartbeat_s: float = 0.5,
        blocking: bool = True,
        read_timeout_s: float = 30.0,
        only_events: list[type] | None = None,
        tracker: SchemaTracker | None = None,
        fast: bool = True,
    ) -> None:
        self.source = source
        self.file = file
        self.pos = pos
        self._server_id = server_id
        self._filter = table_filter
        self._heartbeat_s = heartbeat_s
        self._blocking = blocking
        self._read_timeout = read_timeout_s
        self._only_events = only_events or _EVENTS
        self._reader: BinLogStreamReader | None = None
        self._tables: dict[int, _Table | None] = {}
        self._layouts: dict[tuple[Any, ...], _Table] = {}
        self._by_columns: dict[int, tuple[list[Any], int, _Table]] = {}
        """By the identity of a table map's column list, which `tablemaps` shares between the
        table maps of one layout: the layout key is then not rebuilt per transaction."""
        self._sequences: set[tuple[str, str]] = set()
        self._tracker = tracker
        self._fast = fast and fastrows.AVAILABLE
        """Rows of covered tables decoded natively (`rowbus.producer.fastrows`); False: the
        pure-Python path for every table (the fallback, and the reference in tests)."""

    def _open(self) -> BinLogStreamReader:
        settings = {
            **self.source.pymysql_kwargs(),
            "read_timeout": max(self._read_timeout, self._heartbeat_s * 4),
            "connect_timeout": 10,
        }
        return BinLogStreamReader(
            connection_settings=settings,
            server_id=self._server_id,
            log_file=self.file,
            log_pos=self.pos,
            resume_stream=True,
            blocking=self._blocking,
            only_events=self._only_events,
            slave_heartbeat=self._heartbeat_s if self._blocking else None,
            pymysql_wrapper=_GuardedConnect(),
            enable_logging=False,
        )

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception as exc:  # noqa: BLE001 - closing a broken stream is best effort
                log.debug("closing binlog stream: %s", exc)
            self._reader = None

    def events(self) -> Iterator[BinlogEvent]:
        """Assembler events from `file:pos` on; ends only when a non-blocking stream ends."""
        where = f"binlog stream of {self.source.name} ({self.source.host}:{self.source.port})"
        self._reader = self._open()
        raw = iter(self._reader)
        translate = self._translate
        while True:
            try:
                event = next(raw)
            except StopIteration:
                return
            except ReaderError:
                raise
            except (pymysql.MySQLError, _ReconnectRefused, OSError, EOFError) as exc:
                raise translate_mysql_error(exc, f"{where} at {self.file}:{self.pos}") from exc
            out = translate(event)
            if out is not None:
                yield out

    def _translate(self, event: Any) -> BinlogEvent | None:
        kind = type(event)
        packet = event.packet
        end = packet.log_pos
        if kind in _OPS:
            found = self._tables.get(event.table_id)
            if found is None:
                return Skipped(end)
            table, convert, plan = found
            return Rows(_OPS[kind], table, end, _decoder(event, kind, convert, plan))
        if kind is TableMapEvent:
            self._table_map(event)
            return Skipped(end)
        if kind is XidEvent:
            return Xid(end, event.timestamp)
        if kind is XAPrepareEvent:
            return XaPrepare(end, event.timestamp)
        if kind is MariadbGtidEvent:
            standalone = bool(event.flags & MARIADB_FL_STANDALONE)
            return GtidMark(event.gtid, end, event.event_size, standalone, opens=True)
        if kind is GtidEvent:
            return GtidMark(str(event.gtid), end, event.event_size, False, opens=False)
        if kind is QueryEvent:
            schema = event.schema
            schema = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema
            query = event.query
            statement = query.decode("utf-8", "replace") if isinstance(query, bytes) else query
            ddl = None
            if self._tracker is not None and classify(statement) is None:
                ddl = self._track(statement, str(schema or ""), end)
            return Query(statement, str(schema or ""), end, event.event_size, event.timestamp, ddl)
        if kind is RotateEvent:
            self.file, self.pos = event.next_binlog, event.position
            return Rotate(event.next_binlog, event.position)
        if kind is HeartbeatLogEvent:
            return ServerHeartbeat(event.ident.rstrip("\x00"), end)
        if kind is PartialUpdateRowsEvent:
            raise ServerMisconfiguredError(f"{self.file}:{end}: {PARTIAL_JSON_REFUSED}")
        if packet.event_type == TRANSACTION_PAYLOAD_EVENT:
            raise ServerMisconfiguredError(f"{self.file}:{end}: {COMPRESSION_REFUSED}")
        if packet.event_type in MARIADB_COMPRESSED_EVENTS:
            raise ServerMisconfiguredError(f"{self.file}:{end}: {MARIADB_COMPRESSION_REFUSED}")
        return Skipped(end)

    def _table_map(self, event: Any) -> None:
        schema, name = event.schema, event.table
        if not self._filter.wanted(schema, name):
            self._tables[event.table_id] = None
            return
        if _is_sequence(event.columns):
            # NEXTVAL writes the sequence's one row; that is a counter, not data a consumer
            # could write (a sink refuses rows into a sequence); its CREATE still passes.
            if (schema, name) not in self._sequences:
                self._sequences.add((schema, name))
                log.info("%s.%s is a sequence: its rows are not published", schema, name)
            self._tables[event.table_id] = None
            return
        cols = event.columns
        generation = self._tracker.generation(schema, name) if self._tracker is not None else 0
        quick = self._by_columns.get(id(cols))
        if quick is not None and quick[0] is cols and quick[1] == generation:
            self._tables[event.table_id] = quick[2]
            return
        layout = (
            schema,
            name,
            bytes(event.null_bitmask),
            tuple((c.type, c.name, c.unsigned, c.is_primary, c.collation_name) for c in cols),
            tuple(tuple(c.enum_values or ()) + tuple(c.set_values or ()) for c in cols),
            tuple(
                (
                    getattr(c, "fsp", None),
                    getattr(c, "precision", None),
                    getattr(c, "bits", 0),
                    getattr(c, "max_length", None),
                    getattr(c, "length_size", None),
                )
                for c in cols
            ),
            generation,
        )
        end = event.packet.log_pos
        found = self._layouts.get(layout)
        if found is None:
            try:
                table = table_schema_from_map(event)
            except MissingMetadataError as exc:
                raise ServerMisconfiguredError(
                    f"table map of {schema}.{name} has no column names: set "
                    "binlog_row_metadata=FULL on the source"
                ) from exc
            for col in cols:
                try:
                    col.__dict__["_rowbus_reader"] = reader_for(col)
                except UnsupportedCharsetError as exc:
                    raise ServerMisconfiguredError(
                        f"column {schema}.{name}.{col.name} uses charset {exc}, which rowbus "
                        "cannot convert to Unicode; convert the column to utf8mb4"
                    ) from exc
            if self._tracker is not None:
                table = self._tracker.on_table_map(table, self._at(end))
            plan = fastrows.plan_for(cols) if self._fast else None
            found = (table, converter_for(table), plan)
            if len(self._layouts) > 10_000:
                self._layouts.clear()
            self._layouts[layout] = found
        if len(self._by_columns) > 10_000:
            self._by_columns.clear()
        self._by_columns[id(cols)] = (cols, generation, found)
        self._tables[event.table_id] = found

    def _at(self, end: int) -> PositionKey:
        return (BinlogPosition(self.file, end).file_number, self.file, end)

    def _track(self, statement: str, schema: str, end: int) -> DdlSchema | None:
        assert self._tracker is not None
        try:
            parsed = parse_ddl(statement, schema)
        except DdlParseError:
            return None
        if any(self._filter.wanted(t.schema, t.table) for t in parsed.touched) or (
            parsed.database is not None and self._filter.schema_wanted(parsed.database)
        ):
            return self._tracker.on_ddl(parsed, statement, self._at(end))
        return None


_Table = tuple[TableSchema, Converter, fastrows.Plan | None]
"""A wanted table's schema, the pure path's converter, and its native plan (None: pure)."""
_MODES = {WriteRowsEvent: 0, DeleteRowsEvent: 1, UpdateRowsEvent: 2}

ImagePairs = list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]


SEQUENCE_COLUMNS = (
    "next_not_cached_value",
    "minimum_value",
    "maximum_value",
    "start_value",
    "increment",
    "cache_size",
    "cycle_option",
    "cycle_count",
)
"""The fixed columns of a MariaDB sequence's table (the table map does not flag one)."""


def _is_sequence(cols: Any) -> bool:
    return (
        len(cols) == len(SEQUENCE_COLUMNS)
        and cols[0].name == SEQUENCE_COLUMNS[0]
        and tuple(c.name for c in cols) == SEQUENCE_COLUMNS
        and not any(c.is_primary for c in cols)
    )


def _decoder(
    event: Any, kind: type, convert: Converter, plan: fastrows.Plan | None
) -> Callable[[], ImagePairs]:
    pure = _pure_decoder(event, kind, convert)
    if plan is None:
        return pure
    mode = _MODES[kind]

    def fast() -> ImagePairs:
        rows = fastrows.decode(event, mode, plan)
        return pure() if rows is None else rows

    return fast


def _pure_decoder(event: Any, kind: type, convert: Converter) -> Callable[[], ImagePairs]:
    if kind is WriteRowsEvent:
        return lambda: [(None, convert(r["values"])) for r in event.rows]
    if kind is DeleteRowsEvent:
        return lambda: [(convert(r["values"]), None) for r in event.rows]
    return lambda: [(convert(r["before_values"]), convert(r["after_values"])) for r in event.rows]
