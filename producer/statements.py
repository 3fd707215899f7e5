"""A binlog stream's statement events as assembler `Query` events, with their context.

`StatementReader.query` reads a Query event's statement as the server read it (decoded by the
session's character_set_client), and for a statement that is not transaction control: the
online schema change's cut-over rewritten as its ALTER (``reader.online_ddl``), the DDL applied
to the shadow schema (`rowbus.producer.tracker`), the session's sql_mode named and its time
zone resolved by the source itself (over the stream's control connection, cached per value).
`load_query` reads a LOAD DATA logged as a statement.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.charset import charset_by_id

from rowbus.producer.assembler import Query
from rowbus.producer.online_ddl import OnlineDdl, is_tool_table
from rowbus.producer.streamtables import position_at
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import DdlSchema, SchemaTracker
from rowbus.producer.txn_control import classify
from rowbus.protocol.ddl import DdlParseError, parse_ddl

log = logging.getLogger(__name__)

LOAD_QUERY_POST_HEADER = 26
"""Execute_load_query's post-header: a query event's 13 bytes, then the file id, the file
name's start and end in the statement and the duplicate handling (4 + 4 + 4 + 1)."""
_QUERY_POST_HEADER = 13
"""A Query event's fixed part: thread id, time, schema length, error code, status length."""
_OFFSET = re.compile(r"([+-])(\d{1,2}):(\d{2})")
"""A session time zone written as an offset (MariaDB and MySQL print it so)."""


class StatementReader:
    """Query events of one stream as `Query` events. `control` gives the stream's control
    connection (None before it is open), which names sql_modes and resolves time zones."""

    def __init__(
        self,
        source: str,
        control: Callable[[], Any],
        table_filter: TableFilter,
        tracker: SchemaTracker | None,
        online: OnlineDdl | None,
    ) -> None:
        self.source = source
        self._control = control
        self._filter = table_filter
        self._tracker = tracker
        self._online = online
        """gh-ost / pt-osc cut-overs rewritten as the ALTER they made (None: reader.online_ddl
        is off)."""
        self._sql_modes: dict[int, str] = {}

    def query(self, event: Any, end: int, file: str) -> Query:
        """The Query event `event` ending at `end` in `file`."""
        schema = event.schema
        schema = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema
        statement = _statement_text(event)
        ddl = None
        sql_mode = None
        micros = None
        zone = None
        if classify(statement) is None:
            if self._online is not None:
                statement = self._cut_over(statement, str(schema or ""), file, end)
            if self._tracker is not None:
                ddl = self._track(statement, str(schema or ""), file, end)
            sql_mode = self._sql_mode(getattr(event, "sql_mode", None))
            # MariaDB writes the statement's microseconds beside the event's seconds.
            micros = event.timestamp * 1_000_000 + int(getattr(event, "hrnow", 0) or 0)
            zone = self._time_zone(getattr(event, "time_zone", None), event.timestamp)
        return Query(
            statement,
            str(schema or ""),
            end,
            event.event_size - getattr(event.packet, "grown", 0),
            event.timestamp,
            ddl,
            sql_mode,
            micros,
            zone,
        )

    def _sql_mode(self, bits: int | None) -> str | None:
        """A statement event's sql_mode (a bit set whose layout is the server's own) named
        by the source server itself; cached per value. None when it cannot be asked."""
        if bits is None:
            return None
        names = self._sql_modes.get(bits)
        if names is None:
            conn = getattr(self._control(), "_ctl_connection", None)
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
                log.warning("%s: cannot name sql_mode %d: %s", self.source, bits, exc)
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
        conn = getattr(self._control(), "_ctl_connection", None)
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
            log.warning("%s: cannot resolve time zone %s: %s", self.source, name, exc)
            return None
        minutes_east = int(row["m"] if isinstance(row, dict) else (row[0] if row else 0))
        sign = "-" if minutes_east < 0 else "+"
        hours, minutes = divmod(abs(minutes_east), 60)
        return f"{sign}{hours:02d}:{minutes:02d}"

    def _cut_over(self, statement: str, schema: str, file: str, end: int) -> str:
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
        return self._online.on_ddl(parsed, statement, position_at(file, end))

    def _track(self, statement: str, schema: str, file: str, end: int) -> DdlSchema | None:
        assert self._tracker is not None
        try:
            parsed = parse_ddl(statement, schema)
        except DdlParseError:
            return None
        if any(self._filter.wanted(t.schema, t.table) for t in parsed.touched) or (
            parsed.database is not None and self._filter.schema_wanted(parsed.database)
        ):
            return self._tracker.on_ddl(parsed, statement, position_at(file, end))
        return None


def load_query(event: Any, end: int) -> Query:
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
