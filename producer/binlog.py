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

Two patches. The library reconnects by itself when the stream drops (2006/2013), from *its*
idea of the position, which can be inside a transaction. `_GuardedConnect` refuses every stream
connection after the first, so a drop surfaces as `SourceUnavailableError` and the reader builds
a new stream from the last transaction end it tracked. And the library drops, unseen, every
event type it has no class for (compressed ones among them): `_TypeChecked`, installed as the
packet wrapper its stream reader builds (process-wide, like `tablemaps`), checks each event's
type code against `rowbus.producer.eventtypes` first, so the reader fails closed.
"""

from __future__ import annotations

import codecs
import logging
import re
import struct
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pymysql
from pymysql.charset import charset_by_id
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
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer import compressed, dumpframes, eventtypes, fastrows, tablemaps, tagged
from rowbus.producer import payload as payloads
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
    CorruptBinlogError,
    PositionPurgedError,
    ReaderError,
    ServerMisconfiguredError,
    SourceUnavailableError,
)
from rowbus.producer.online_ddl import OnlineDdl, is_tool_table
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

PARTIAL_IMAGE_REFUSED = (
    "the row's {missing}: the writing session ran with binlog_row_image="
    "MINIMAL or NOBLOB, so the values a consumer needs are not in the binlog; set "
    "binlog_row_image=FULL globally and for every session (SET SESSION overrides it), then "
    "add {table} to reader.exclude_tables for one restart and take it out again: it is "
    "snapshotted anew (README: Row images)"
)
FRAMED = True
"""Whether new streams frame the dump stream themselves (`rowbus.producer.dumpframes`) when they
decode natively; benchmarks turn it off to measure the library's framing."""
MARIADB_FL_STANDALONE = 0x01
LOAD_QUERY_POST_HEADER = 26
"""Execute_load_query's post-header: a query event's 13 bytes, then the file id, the file
name's start and end in the statement and the duplicate handling (4 + 4 + 4 + 1)."""
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
    library's own reading, and `BinlogStream._wrapper` on the framed path, whose natively read
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


def _unpacked(packets: Iterator[bytes]) -> Iterator[bytes]:
    """The framed stream with each Transaction_payload replaced by the events it holds."""
    unpack, kind = payloads.unpack, payloads.TRANSACTION_PAYLOAD
    for packet in packets:
        if packet[5] == kind:
            yield from unpack(packet)
        else:
            yield packet


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
            return PositionPurgedError(f"{where}: the server no longer has it ({text})")
        return SourceUnavailableError(f"{where}: the server stopped the stream ({text})")
    kind = mysql.classify(exc)
    if kind is mysql.Kind.DENIED:
        advice = mysql.wrong_login(exc, "the source") or GRANT_HINT
        return ServerMisconfiguredError(f"{where}: access denied ({text}); {advice}")
    if kind is mysql.Kind.TLS:
        return ServerMisconfiguredError(f"{where}: {text}")
    return SourceUnavailableError(f"{where}: {type(exc).__name__} {code or ''} {text}".strip())


GRANT_HINT = "grant the reader's user REPLICATION SLAVE, BINLOG MONITOR (MySQL: REPLICATION CLIENT)"

_OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE}


def _load_query(event: Any, end: int) -> Query:
    """LOAD DATA logged as a statement (binlog_format STATEMENT, or MIXED): the server writes
    the file's bytes (Begin_load_query, Append_block) and then the statement in an
    Execute_load_query event, which no rows event follows. The library reads only its
    post-header; the default schema and the statement follow the status variables, as in a
    query event. Handed over as a `Query`: the assembler refuses it on a table the reader
    reads (its rows are not in the binlog) and passes it by on the others."""
    packet = event.packet
    packet.advance(event.status_vars_length)
    schema = packet.read(event.schema_length)
    packet.advance(1)  # the schema's terminating NUL
    size = event.event_size - LOAD_QUERY_POST_HEADER - event.status_vars_length
    statement = packet.read(size - event.schema_length - 1)
    return Query(
        statement.decode("utf-8", "replace"),
        schema.decode("utf-8", "replace"),
        end,
        event.event_size,
        event.timestamp,
    )


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
        self._sql_modes: dict[int, str] = {}
        self._whole: dict[int, bytes] = {}
        """Column count -> the columns-present bitmap of a whole row image (`_require_whole`)."""
        self._tracker = tracker
        self._online = online
        """gh-ost / pt-osc cut-overs rewritten as the ALTER they made (None: reader.online_ddl
        is off)."""
        self._fast = fast and fastrows.AVAILABLE
        """Rows of covered tables decoded natively (`rowbus.producer.fastrows`); False: the
        pure-Python path for every table (the fallback, and the reference in tests)."""
        default = self._fast and FRAMED
        self._framed = (default if framed is None else framed) and self._only_events is _EVENTS
        """The stream framed by `rowbus.producer.dumpframes` after the first event (see
        `_framed_events`); False: every event framed and built by the library."""
        self._maps: dict[bytes, tuple[str, str, int, _Table | None, Any]] = {}
        """Framed path: a table map's bytes (table id to the end of the body) -> schema, table,
        tracker generation, what `_table_map` made of it and the library's table object."""

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
            yield from self._framed_events()
        except _Refused as refused:
            raise eventtypes.refusal(refused.code, self.file, refused.end) from None
        except compressed.Corrupt as corrupt:
            raise _corrupt(corrupt, self.file) from None
        except ReaderError:
            raise
        except (pymysql.MySQLError, _ReconnectRefused, OSError, EOFError) as exc:
            raise translate_mysql_error(exc, f"{where} at {self.file}:{self.pos}") from exc

    def _framed_events(self) -> Iterator[BinlogEvent]:  # noqa: PLR0915 - one hot loop
        """Assembler events from the packets `dumpframes` cuts: GTID, XID, table maps seen
        before and rows events of natively planned tables are read here from the bytes; every
        other event is built by the library from the same bytes and translated as before, so
        both ways give the same events (`tests/integration/producer/test_fastpath.py`)."""
        lib = self._reader
        assert lib is not None
        tail = 4 if lib._BinLogStreamReader__use_checksum else 0
        wrap = self._wrapper(lib)
        tables = self._tables
        maps = self._maps
        tracker = self._tracker
        translate = self._translate
        header = _HEADER.unpack_from
        gtid = _MARIADB_GTID.unpack_from
        decode_body = fastrows.decode_body
        inflate, compressed_rows = compressed.inflate, compressed.ROWS
        for payload in _unpacked(dumpframes.packets(lib._stream_connection._rfile)):
            ts, kind, server_id, size, end = header(payload, 1)
            if kind in compressed_rows:
                # Inflated here so they take the native way below; Query_compressed goes to
                # the library (`_TypeChecked`), which keeps its size in the binlog.
                payload = inflate(payload, bool(tail))  # noqa: PLW2901 - it stands for it
                kind = payload[5]
            if kind in _ROWS_KINDS:
                table_id = int.from_bytes(payload[20:26], "little")
                found = tables.get(table_id)
                if found is None:
                    if table_id in tables:  # an unwanted table's rows
                        yield Skipped(end)
                        continue
                elif found[2] is not None:
                    mode, v2, cls = _ROWS_KINDS[kind]
                    p = 30 + int.from_bytes(payload[28:30], "little") - 2 if v2 else 28
                    ncols = payload[p]
                    if ncols < 251:  # a one-byte length-encoded integer
                        p += 1
                        nbytes = (ncols + 7) >> 3
                        plan = found[2]
                        if ncols == len(plan):
                            present = payload[p : p + nbytes]
                            p += nbytes
                            after = None
                            if mode == 2:  # updates: the after image's bitmap
                                after = payload[p : p + nbytes]
                                p += nbytes
                            whole = self._whole.get(ncols)
                            if present != whole or (after is not None and after != whole):
                                self._require_whole(found[0], ncols, present, after, end)
                            yield Rows(
                                _OPS[cls],
                                found[0],
                                end,
                                _framed_decoder(
                                    decode_body,
                                    payload,
                                    p,
                                    len(payload) - tail,
                                    mode,
                                    plan,
                                    present,
                                    after,
                                    partial(wrap, payload),
                                    cls,
                                    found[1],
                                ),
                            )
                            continue
            elif kind == _TABLE_MAP:
                key = payload[20 : len(payload) - tail]
                hit = maps.get(key)
                if hit is not None and (
                    tracker is None or tracker.generation(hit[0], hit[1]) == hit[2]
                ):
                    table_id = int.from_bytes(payload[20:26], "little")
                    tables[table_id] = hit[3]
                    lib.table_map[table_id] = hit[4]
                    yield Skipped(end)
                    continue
                event = wrap(payload)
                if event is None:
                    continue
                self._table_map(event)
                if len(maps) > _MAPS_LIMIT:
                    maps.clear()
                maps[key] = (
                    event.schema,
                    event.table,
                    tracker.generation(event.schema, event.table) if tracker is not None else 0,
                    tables[event.table_id],
                    lib.table_map[event.table_id],
                )
                yield Skipped(end)
                continue
            elif kind == _XID:
                yield Xid(end, ts)
                continue
            elif kind == _MARIADB_GTID_EVENT:
                seq, domain, flags = gtid(payload, 20)
                yield GtidMark(
                    f"{domain}-{server_id}-{seq}",
                    end,
                    size - 19 - tail,
                    bool(flags & MARIADB_FL_STANDALONE),
                    opens=True,
                )
                continue
            event = wrap(payload)
            if event is not None:
                out = translate(event)
                if out is not None:
                    yield out

    def _wrapper(self, lib: BinLogStreamReader) -> Callable[[bytes], Any]:
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
            if kind == _ROTATE and packet.timestamp != 0:
                lib.table_map = {}
            elif kind == _FORMAT_DESCRIPTION and event is not None:
                lib.mysql_version = event.mysql_version
                setattr(lib, p + "post_header_lengths", event.post_header_len)
            if kind == _TABLE_MAP and event is not None:
                lib.table_map[event.table_id] = event.get_table()
            if event is None or event.__class__ not in allowed:
                return None
            return event

        return wrap

    def _translate(self, event: Any) -> BinlogEvent | None:
        kind = type(event)
        packet = event.packet
        end = packet.log_pos
        if kind in _OPS:
            found = self._tables.get(event.table_id)
            if found is None:
                return Skipped(end)
            table, convert, plan = found
            ncols = event.number_of_columns
            after = event.columns_present_bitmap2 if kind is UpdateRowsEvent else None
            present = event.columns_present_bitmap
            whole = self._whole.get(ncols)
            if present != whole or (after is not None and after != whole):
                self._require_whole(table, ncols, present, after, end)
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
        if kind is NotImplementedEvent and event.event_type == tagged.GTID_TAGGED:
            return GtidMark(self._tagged(event, end), end, event.event_size, False, opens=False)
        if kind is QueryEvent:
            schema = event.schema
            schema = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema
            statement = _statement_text(event)
            ddl = None
            sql_mode = None
            micros = None
            zone = None
            if classify(statement) is None:
                if self._online is not None:
                    statement = self._cut_over(statement, str(schema or ""), end)
                if self._tracker is not None:
                    ddl = self._track(statement, str(schema or ""), end)
                sql_mode = self._sql_mode(getattr(event, "sql_mode", None))
                # MariaDB writes the statement's microseconds beside the event's seconds.
                micros = event.timestamp * 1_000_000 + int(getattr(event, "hrnow", 0) or 0)
                zone = self._time_zone(getattr(event, "time_zone", None), event.timestamp)
            return Query(
                statement,
                str(schema or ""),
                end,
                event.event_size - getattr(packet, "grown", 0),
                event.timestamp,
                ddl,
                sql_mode,
                micros,
                zone,
            )
        if kind is ExecuteLoadQueryEvent:
            return _load_query(event, end)
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

    def _sql_mode(self, bits: int | None) -> str | None:
        """A statement event's sql_mode (a bit set whose layout is the server's own) named
        by the source server itself; cached per value. None when it cannot be asked."""
        if bits is None:
            return None
        names = self._sql_modes.get(bits)
        if names is None:
            conn = getattr(self._reader, "_ctl_connection", None)
            if conn is None:
                return None
            try:
                with conn.cursor() as cur:
                    cur.execute("SET @rowbus_sql_mode = @@SESSION.sql_mode")
                    cur.execute("SET SESSION sql_mode = %s", (bits,))
                    cur.execute("SELECT @@SESSION.sql_mode AS m")
                    row = cur.fetchone()  # the library's connection makes dicts
                    cur.execute("SET SESSION sql_mode = @rowbus_sql_mode")
            except (pymysql.MySQLError, OSError) as exc:
                log.warning("%s: cannot name sql_mode %d: %s", self.source.name, bits, exc)
                return None
            value = row["m"] if isinstance(row, dict) else (row[0] if row else "")
            names = self._sql_modes[bits] = str(value)
        return names

    def _time_zone(self, raw: bytes | None, seconds: int) -> str | None:
        """A statement event's session time zone as its UTC offset at the statement's time,
        ``+HH:MM`` (PROTOCOL.md §1.3). An offset is taken as written; a named zone or
        ``SYSTEM`` is resolved by the source itself at that moment (only it knows its system
        zone, and a sink need not have time zone tables). None when the event has no zone
        (the statement did not use it) or the source cannot be asked."""
        if not raw:
            return None
        name = raw.decode("ascii", "replace")
        offset = _OFFSET.fullmatch(name)
        if offset is not None:
            sign, hours, minutes = offset.groups()
            return f"{sign}{int(hours):02d}:{minutes}"
        conn = getattr(self._reader, "_ctl_connection", None)
        if conn is None:
            return None
        try:
            with conn.cursor() as cur:
                cur.execute("SET @rowbus_time_zone = @@SESSION.time_zone")
                cur.execute("SET SESSION time_zone = %s, SESSION timestamp = %s", (name, seconds))
                # Both read the one session timestamp, so their difference is the offset.
                cur.execute("SELECT TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW()) AS m")
                row = cur.fetchone()  # the library's connection makes dicts
                cur.execute(
                    "SET SESSION timestamp = DEFAULT, SESSION time_zone = @rowbus_time_zone"
                )
        except (pymysql.MySQLError, OSError) as exc:
            log.warning("%s: cannot resolve time zone %s: %s", self.source.name, name, exc)
            return None
        minutes_east = int(row["m"] if isinstance(row, dict) else (row[0] if row else 0))
        sign = "-" if minutes_east < 0 else "+"
        hours, minutes = divmod(abs(minutes_east), 60)
        return f"{sign}{hours:02d}:{minutes:02d}"

    def _require_whole(
        self, table: TableSchema, ncols: int, present: bytes, after: bytes | None, end: int
    ) -> None:
        """Refuses a rows event whose images lack columns: written as NULL they would overwrite
        the sink's values (NOBLOB's unchanged blobs) or leave the row unfindable (MINIMAL).
        A whole bitmap is remembered by column count, so the check costs one comparison."""
        lacks = []
        for image, bitmap in (("before" if after is not None else "", present), ("after", after)):
            missing = [
                table.columns[i].name if i < len(table.columns) else f"#{i}"
                for i in range(ncols)
                if bitmap is not None and not (bitmap[i >> 3] >> (i & 7)) & 1
            ]
            if missing:
                lacks.append(f"{image} image lacks {', '.join(missing)}".lstrip())
        if lacks:
            what = PARTIAL_IMAGE_REFUSED.format(missing="; ".join(lacks), table=table.qualified)
            raise ServerMisconfiguredError(f"{self.file}:{end}: {table.qualified}: {what}")
        self._whole[ncols] = present

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

    def _cut_over(self, statement: str, schema: str, end: int) -> str:
        """The statement as published: an online schema change's cut-over becomes its ALTER."""
        assert self._online is not None
        try:
            parsed = parse_ddl(statement, schema)
        except DdlParseError:
            return statement
        # A cut-over of an excluded table passes as is (the way out of a refused one, below).
        real = [t for t in parsed.touched if not is_tool_table(t.table)]
        if not (
            any(self._filter.wanted(t.schema, t.table) for t in real)
            if real
            else any(self._filter.schema_wanted(t.schema) for t in parsed.touched)
        ):
            return statement
        return self._online.on_ddl(parsed, statement, self._at(end))

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


_HEADER = struct.Struct("<IBIII")
"""An event header after the packet's OK byte: timestamp, type, server id, size, end."""
_MARIADB_GTID = struct.Struct("<QIB")
_XID, _ROTATE, _FORMAT_DESCRIPTION, _TABLE_MAP, _MARIADB_GTID_EVENT = 16, 4, 15, 19, 162
_ROWS_KINDS = {
    23: (0, False, WriteRowsEvent),
    24: (2, False, UpdateRowsEvent),
    25: (1, False, DeleteRowsEvent),
    30: (0, True, WriteRowsEvent),
    31: (2, True, UpdateRowsEvent),
    32: (1, True, DeleteRowsEvent),
}
"""Rows event types (v1: MariaDB, v2: MySQL 5.6+) -> decoder mode, v2 (extra data after the
flags), the library's class."""
_MAPS_LIMIT = 10_000

_Table = tuple[TableSchema, Converter, fastrows.Plan | None]
"""A wanted table's schema, the pure path's converter, and its native plan (None: pure)."""
_MODES = {WriteRowsEvent: 0, DeleteRowsEvent: 1, UpdateRowsEvent: 2}

ImagePairs = list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]]


_QUERY_POST_HEADER = 13
_OFFSET = re.compile(r"([+-])(\d{1,2}):(\d{2})")
"""A session time zone written as an offset (MariaDB and MySQL print it so)."""
"""A Query event's fixed part: thread id, time, schema length, error code, status length."""


def _statement_text(event: Any) -> str:
    """A Query event's statement as the server read it: its bytes decoded by the session's
    character_set_client (mysql-replication decodes them as UTF-8, which turns a latin1 or
    gbk session's DDL into other characters than the server saw). The bytes are the event's
    last `query_len`; when they cannot be found as the library found them, its text stands."""
    text = event.query
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    codec = _client_codec(getattr(event, "character_set_client", None))
    if codec is None:
        return str(text)
    try:
        data = event.packet.packet.get_all_data()
        start = 1 + 19 + _QUERY_POST_HEADER + event.status_vars_length + event.schema_length + 1
    except (AttributeError, TypeError):
        return str(text)
    for end in (len(data), len(data) - 4):  # with and without the event's checksum
        raw = data[start:end]
        if raw.decode("utf-8", "backslashreplace") == text:
            try:
                return str(raw.decode(codec))
            except UnicodeDecodeError:
                return str(text)
    return str(text)


def _client_codec(collation_id: int | None) -> str | None:
    """The Python codec of a session's character_set_client (a collation id); None for
    UTF-8, binary or an id pymysql does not know (the library's UTF-8 reading stands)."""
    if not collation_id:
        return None
    try:
        encoding = str(charset_by_id(collation_id).encoding)
    except KeyError:
        return None
    if encoding in ("utf8", "binary"):
        return None
    try:
        codecs.lookup(encoding)
    except LookupError:
        return None
    return encoding


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


def _framed_decoder(
    decode_body: Callable[..., ImagePairs | None],
    payload: bytes,
    start: int,
    end: int,
    mode: int,
    plan: fastrows.Plan,
    present: bytes,
    after: bytes | None,
    build: Callable[[], Any],
    kind: type,
    convert: Converter,
) -> Callable[[], ImagePairs]:
    """A framed rows event's decoder: native from the bytes; an event the native decoder leaves
    is built by the library from the same bytes and decoded by the pure path."""

    def decode() -> ImagePairs:
        rows = decode_body(payload, start, end, mode, plan, present, after)
        if rows is not None:
            return rows
        return _pure_decoder(build(), kind, convert)()

    return decode


def _pure_decoder(event: Any, kind: type, convert: Converter) -> Callable[[], ImagePairs]:
    if kind is WriteRowsEvent:
        return lambda: [(None, convert(r["values"])) for r in event.rows]
    if kind is DeleteRowsEvent:
        return lambda: [(convert(r["values"]), None) for r in event.rows]
    return lambda: [(convert(r["before_values"]), convert(r["after_values"])) for r in event.rows]
