"""The seam around mysql-replication: a binlog stream in file/position mode, as assembler events.

Why file/position mode and not GTID mode. mysql-replication's MariaDB GTID mode has three traps
(see notes/ENVIRONMENT.md): its COM_BINLOG_DUMP packet declares a wrong length (the server
resets the stream at the end of a backlog), its automatic reconnect restarts from the *original*
GTID, and with ``is_mariadb=True`` it ignores log_file/log_pos. In file/position mode the dump
packet is right, the same code serves MySQL and MariaDB, and the library still sets
``@mariadb_slave_capability=4`` so MariaDB sends its real GTID events: every transaction still
carries its GTID. The reader tracks the position itself (transaction ends only, see
`rowbus.producer.assembler`); a GTID start position is turned into a file/position by a scan
(`rowbus.producer.locator`).

Two patches. The library reconnects by itself when the stream drops (2006/2013), from *its*
idea of the position, which can be inside a transaction. `_GuardedConnect` refuses every stream
connection after the first, so a drop surfaces as `SourceUnavailableError` and the reader builds
a new stream from the last transaction end it tracked. And the library drops, unseen, every
event type it has no class for (compressed ones among them): `_TypeChecked`, installed as the
packet wrapper its stream reader builds (process-wide, like `tablemaps`), checks each event's
type code against `rowbus.producer.eventtypes` first, so the reader fails closed.

`BinlogStream` owns the connection and the translation of the library's events; the parts it
uses, one job each: `streamtables` (table maps to schemas, converters and native plans),
`statements` (statement events with their session context and DDL tracking) and `framed` (the
dump stream read past the library once it is open).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader, binlogstream
from pymysqlreplication.event import (
    ExecuteLoadQueryEvent,
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
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer import compressed, eventtypes, fastrows, jsondiff, tablemaps, tagged
from rowbus.producer import payload as payloads
from rowbus.producer.assembler import (
    BinlogEvent,
    GtidMark,
    Rotate,
    Rows,
    ServerHeartbeat,
    Skipped,
    XaPrepare,
    Xid,
)
from rowbus.producer.exceptions import (
    CorruptBinlogError,
    PositionPurgedError,
    ReaderError,
    ServerMisconfiguredError,
    SourceUnavailableError,
)
from rowbus.producer.framed import (
    FORMAT_DESCRIPTION,
    MARIADB_FL_STANDALONE,
    ROTATE,
    TABLE_MAP,
    FramedReader,
)
from rowbus.producer.online_ddl import OnlineDdl
from rowbus.producer.statements import StatementReader, load_query
from rowbus.producer.streamtables import OPS, StreamTables, decoder
from rowbus.producer.tables import (
    TableFilter,
)
from rowbus.producer.tracker import SchemaTracker
from rowbus.producer.values import install

log = logging.getLogger(__name__)
install()  # our value layer decodes the column types the library gets wrong
tablemaps.install()  # table maps parsed once per table id and layout
jsondiff.install()  # partial JSON updates made whole from their before images

FRAMED = True
"""Whether new streams frame the dump stream themselves (`rowbus.producer.dumpframes`) when they
decode natively; benchmarks turn it off to measure the library's framing."""
ER_MASTER_FATAL_READING_BINLOG = 1236
TRANSACTION_EVENTS = [
    RotateEvent,
    MariadbGtidEvent,
    GtidEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    NotImplementedEvent,  # MySQL 8.3+'s tagged GTID event among them (`tagged`)
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
    PartialUpdateRowsEvent,
    HeartbeatLogEvent,
    # Read only to keep the position exact (the server's heartbeat reports the end of these).
    FormatDescriptionEvent,
    MariadbGtidListEvent,
    MariadbBinLogCheckPointEvent,
    PreviousGtidsEvent,
    StopEvent,
    ExecuteLoadQueryEvent,
    # Ignored types the library has no class for (`eventtypes`); read for the position.
    NotImplementedEvent,
]


class _Refused(Exception):  # noqa: N818 - control flow inside this module
    """An event whose type `eventtypes` refuses or does not know, at its end position."""

    def __init__(self, code: int, end: int) -> None:
        super().__init__(code, end)
        self.code, self.end = code, end


class _TypeChecked(BinLogPacketWrapper):  # type: ignore[misc]
    """The library's packet wrapper, which every event packet goes through on every path (the
    library's own reading, and `_wrapper` on the framed path, whose natively read
    kinds are all decoded ones). It refuses an event by its type code before the library parses
    it or drops it: the library leaves out by itself every type it has no class for, the
    classes it was not asked for and some events it could not parse, which is how compressed
    events passed unseen."""

    grown = 0
    """How many bytes longer the event is than in the binlog: a compressed event's inflation
    (`rowbus.producer.compressed`); a Query's size (its start, `end - size`) subtracts it."""

    def __init__(self, from_packet: Any, *args: Any, **kwargs: Any) -> None:
        data = from_packet.get_all_data()
        code = data[5]  # after the OK byte and the 4-byte timestamp
        if code not in eventtypes.PASSED:
            raise _Refused(code, int.from_bytes(data[14:18], "little"))
        if code in compressed.PLAIN:
            # The library then reads the ordinary event it stands for, as if uncompressed.
            use_checksum = kwargs["use_checksum"] if "use_checksum" in kwargs else args[3]
            plain = compressed.inflate(data, bool(use_checksum))
            from_packet = MysqlPacket(plain, "utf8")
            self.grown = len(plain) - len(data)
        super().__init__(from_packet, *args, **kwargs)


binlogstream.BinLogPacketWrapper = _TypeChecked  # the name its stream reader builds packets by


class _ReconnectRefused(Exception):  # noqa: N818 - control flow inside this module
    """The library tried to reconnect the stream by itself."""


class _GuardedConnect:
    """`pymysql_wrapper` that allows one stream connection; control connections pass. The
    stream connection's packets go through `_Unpacking` (the library reads one event per
    packet; a Transaction_payload packet holds many)."""

    def __init__(self) -> None:
        self.stream_connections = 0

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection[Any]:
        if "cursorclass" not in kwargs:  # the ctl connection sets a DictCursor
            self.stream_connections += 1
            if self.stream_connections > 1:
                raise _ReconnectRefused
            conn = mysql.connect(**kwargs)
            conn._read_packet = _Unpacking(conn._read_packet)  # type: ignore[method-assign]
            return conn
        return mysql.connect(**kwargs)


class _Unpacking:
    """A connection's ``_read_packet`` that hands a Transaction_payload's events over one per
    call, as if the server had sent them uncompressed (`rowbus.producer.payload`); every other
    packet passes as read. The payload's events are unpacked as they are asked for."""

    def __init__(self, read: Callable[..., Any]) -> None:
        self._read = read
        self._pending: Iterator[bytes] | None = None

    def __call__(self, *args: Any) -> Any:
        if self._pending is not None:
            inner = next(self._pending, None)
            if inner is not None:
                return (args[0] if args else MysqlPacket)(inner, "utf8")
            self._pending = None
        packet = self._read(*args)
        data = packet._data
        if len(data) > 5 and data[5] == payloads.TRANSACTION_PAYLOAD and data[0] == 0:
            self._pending = payloads.unpack(data)
            return self(*args)
        return packet


def _corrupt(corrupt: compressed.Corrupt, file: str) -> CorruptBinlogError:
    name = eventtypes.EVENT_TYPES[corrupt.code].name
    return CorruptBinlogError(
        f"{file}:{corrupt.end}: {name} event (type {corrupt.code}) cannot be inflated: "
        f"{corrupt.why}; its changes cannot be read (check the binlog on the source with "
        "mysqlbinlog at this position)"
    )


def translate_mysql_error(exc: BaseException, where: str) -> ReaderError:
    """One `ReaderError` for a pymysql (or library) failure at `where`."""
    if isinstance(exc, _ReconnectRefused):
        return SourceUnavailableError(f"{where}: the replication stream dropped")
    args: list[Any] = list(getattr(exc, "args", ()))
    code = args[0] if args and isinstance(args[0], int) else None
    text = str(args[1]) if len(args) > 1 else str(exc)
    if code == ER_MASTER_FATAL_READING_BINLOG:
        if "purged" in text or "first log file" in text or "not find" in text.lower():
            return PositionPurgedError(
                f"{where}: the server no longer has it ({text}); {PURGED_HINT}"
            )
        return SourceUnavailableError(f"{where}: the server stopped the stream ({text})")
    kind = mysql.classify(exc)
    if kind is mysql.Kind.DENIED:
        advice = mysql.wrong_login(exc, "the source") or GRANT_HINT
        return ServerMisconfiguredError(f"{where}: access denied ({text}); {advice}")
    if kind is mysql.Kind.TLS:
        return ServerMisconfiguredError(f"{where}: {text}")
    return SourceUnavailableError(f"{where}: {type(exc).__name__} {code or ''} {text}".strip())


PURGED_HINT = (
    "start again with reader.start=earliest (changes in between are lost to subscribers), or "
    "take a fresh snapshot and start at its position; keep binlogs longer on the source "
    "(binlog_expire_logs_seconds) than a reader can be stopped"
)
GRANT_HINT = "grant the reader's user REPLICATION SLAVE, BINLOG MONITOR (MySQL: REPLICATION CLIENT)"


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
        framed: bool | None = None,
        online: OnlineDdl | None = None,
    ) -> None:
        self.source = source
        self.file = file
        self.pos = pos
        self._server_id = server_id
        self._heartbeat_s = heartbeat_s
        self._blocking = blocking
        self._read_timeout = read_timeout_s
        self._only_events = only_events or _EVENTS
        self._reader: BinLogStreamReader | None = None
        self.tables = StreamTables(table_filter, tracker, fast and fastrows.AVAILABLE)
        """What the stream's table maps made of their tables."""
        self._statements = StatementReader(
            source.name, lambda: self._reader, table_filter, tracker, online
        )
        self._tracker = tracker
        self._fast = fast and fastrows.AVAILABLE
        """Rows of covered tables decoded natively (`rowbus.producer.fastrows`); False: the
        pure-Python path for every table (the fallback, and the reference in tests)."""
        default = self._fast and FRAMED
        self._framed = (default if framed is None else framed) and self._only_events is _EVENTS
        """The stream framed by `rowbus.producer.framed` after the first event; False: every
        event framed and built by the library."""

    def _open(self) -> BinLogStreamReader:
        # Both of the library's connections (stream and control) are opened by `_GuardedConnect`
        # through the seam, which renders the source's password and TLS settings.
        settings = {
            "endpoint": self.source,
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
            # Yield the events it has no class for (they are in `only_events`): the ignored
            # kinds then give a Skipped at their end, and MySQL's tagged GTID event its GTID.
            filter_non_implemented_events=False,
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
            except _Refused as refused:
                raise eventtypes.refusal(refused.code, self.file, refused.end) from None
            except compressed.Corrupt as corrupt:
                raise _corrupt(corrupt, self.file) from None
            out = translate(event)
            if out is not None:
                yield out
            if self._framed:
                # The library has connected, sent COM_BINLOG_DUMP and read the first event:
                # the rest of the stream is framed here, on the same connection.
                break
        try:
            lib = self._reader
            assert lib is not None
            framed = FramedReader(
                lib, _wrapper(lib), self.tables, self._tracker, self._translate, lambda: self.file
            )
            yield from framed.events()
        except _Refused as refused:
            raise eventtypes.refusal(refused.code, self.file, refused.end) from None
        except compressed.Corrupt as corrupt:
            raise _corrupt(corrupt, self.file) from None
        except ReaderError:
            raise
        except (pymysql.MySQLError, _ReconnectRefused, OSError, EOFError) as exc:
            raise translate_mysql_error(exc, f"{where} at {self.file}:{self.pos}") from exc

    def _translate(self, event: Any) -> BinlogEvent | None:
        kind = type(event)
        packet = event.packet
        end = packet.log_pos
        if kind in OPS:
            found = self.tables.tables.get(event.table_id)
            if found is None:
                return Skipped(end)
            table, convert, plan = found
            ncols = event.number_of_columns
            update = kind is UpdateRowsEvent or kind is PartialUpdateRowsEvent
            after = event.columns_present_bitmap2 if update else None
            present = event.columns_present_bitmap
            whole = self.tables.whole.get(ncols)
            if present != whole or (after is not None and after != whole):
                self.tables.require_whole(table, ncols, present, after, self.file, end)
            decode = decoder(event, kind, convert, plan)
            if kind is PartialUpdateRowsEvent:
                decode = _partial(decode, f"{self.file}:{end}: {table.qualified}")
            return Rows(OPS[kind], table, end, decode)
        if kind is TableMapEvent:
            self.tables.on_table_map(event, self.file)
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
        if kind is NotImplementedEvent and event.event_type == tagged.GTID_TAGGED:
            return GtidMark(self._tagged(event, end), end, event.event_size, False, opens=False)
        if kind is QueryEvent:
            return self._statements.query(event, end, self.file)
        if kind is ExecuteLoadQueryEvent:
            return load_query(event, end)
        if kind is RotateEvent:
            self.file, self.pos = event.next_binlog, event.position
            return Rotate(event.next_binlog, event.position)
        if kind is HeartbeatLogEvent:
            return ServerHeartbeat(event.ident.rstrip("\x00"), end)
        return Skipped(end)

    def _tagged(self, event: Any, end: int) -> str:
        """A tagged GTID event's ``uuid:tag:N`` (the library has no class for it)."""
        body = event.packet.packet.get_all_data()[20:]  # the message's size bounds it
        try:
            return tagged.gtid(body)
        except tagged.TaggedGtidError as exc:
            raise CorruptBinlogError(
                f"{self.file}:{end}: Gtid_tagged event cannot be read: {exc}; check the binlog "
                "on the source with mysqlbinlog at this position"
            ) from None


PARTIAL_JSON_REFUSED = (
    "binlog_row_value_options=PARTIAL_JSON: {why}; the row's JSON cannot be made whole "
    "(binlog_row_image must be FULL so each diff has its before document); set "
    "binlog_row_image=FULL, or binlog_row_value_options='' (empty) to log whole JSON values"
)


def _partial(decode: Callable[[], Any], where: str) -> Callable[[], Any]:
    """A Partial_update_rows event's decoder, whose diffs that do not fit their before image
    stop the reader with one line at the event (`rowbus.producer.jsondiff`)."""

    def run() -> Any:
        try:
            return decode()
        except jsondiff.JsonDiffError as exc:
            why = PARTIAL_JSON_REFUSED.format(why=exc)
            raise ServerMisconfiguredError(f"{where}: {why}") from None

    return run


def _wrapper(lib: BinLogStreamReader) -> Callable[[bytes], Any]:
    """Builds the library's event from a payload as its ``fetchone`` does (with its side
    effects on the stream: table map registry, rotate, format description); None for an
    event the library would not yield."""
    p = "_BinLogStreamReader__"
    allowed = getattr(lib, p + "allowed_events")
    options = [
        getattr(lib, p + name)
        for name in (
            "use_checksum",
            "allowed_events_in_packet",
            "only_tables",
            "ignored_tables",
            "only_schemas",
            "ignored_schemas",
            "freeze_schema",
            "ignore_decode_errors",
            "verify_checksum",
            "optional_meta_data",
            "enable_logging",
            "use_column_name_cache",
        )
    ]

    def wrap(payload: bytes) -> Any:
        packet = _TypeChecked(
            MysqlPacket(payload, "utf8"),
            lib.table_map,
            lib._ctl_connection,
            lib.mysql_version,
            *options,
            getattr(lib, p + "post_header_lengths"),
        )
        event = packet.event
        kind = packet.event_type
        if kind == ROTATE and packet.timestamp != 0:
            lib.table_map = {}
        elif kind == FORMAT_DESCRIPTION and event is not None:
            lib.mysql_version = event.mysql_version
            setattr(lib, p + "post_header_lengths", event.post_header_len)
        if kind == TABLE_MAP and event is not None:
            lib.table_map[event.table_id] = event.get_table()
        if event is None or event.__class__ not in allowed:
            return None
        return event

    return wrap
