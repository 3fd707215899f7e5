"""Plain SQL against the source server: start-up checks, binlog files, positions, live schemas.

Every pymysql failure is translated into a `ReaderError` here or in `rowbus.producer.binlog`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import TransactionAssembler
from rowbus.producer.binlog import (
    GRANT_HINT,
    TRANSACTION_EVENTS,
    BinlogStream,
    translate_mysql_error,
)
from rowbus.producer.ddl.apply import Charsets
from rowbus.producer.definitions import create_statements
from rowbus.producer.eventtypes import REFUSED_SETTINGS
from rowbus.producer.exceptions import (
    BadStartPositionError,
    PositionPurgedError,
    ServerMisconfiguredError,
)
from rowbus.producer.positions import GtidState, StartPosition, is_mariadb_gtid
from rowbus.producer.tables import CHAR_TYPES, TableFilter
from rowbus.producer.tracker import Extras
from rowbus.protocol.events import BinlogPosition, ColumnSchema, IndexSchema, TableSchema
from rowbus.protocol.positions import parse_gtid_set

log = logging.getLogger(__name__)

_REQUIRED = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
_ENUM_ELEMENTS = re.compile(r"'((?:[^'\\]|''|\\.)*)'")
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_ESCAPED = re.compile(r"''|\\(.)")


def _member(quoted: str) -> str:
    """An ENUM/SET member as COLUMN_TYPE spells it ('' for a quote, a backslash escaping)."""
    return _ESCAPED.sub(lambda m: "'" if m.group(1) is None else _ESCAPES.get(m[1], m[1]), quoted)


_GTID_INFO = re.compile(
    r"GTID(?:_NEXT)?\W+'?([0-9a-fA-F-]{36}(?::[A-Za-z_][A-Za-z0-9_]*)?:\d+|\d+-\d+-\d+)"
)
"""A GTID event's Info in SHOW BINLOG EVENTS: MariaDB ``BEGIN GTID 0-1-42``, MySQL
``SET @@SESSION.GTID_NEXT= 'uuid:42'`` or, tagged (8.3+), ``'uuid:tag:42'``."""
_USE_INFO = re.compile(r"use `((?:[^`]|``)*)`; (.*)", re.DOTALL)
"""A statement event's Info in SHOW BINLOG EVENTS: its default schema, then the statement."""


class SourceServer:
    """A control connection to one source. Construct, `connect()`, use, `close()`."""

    def __init__(self, source: SourceConnection) -> None:
        self.source = source
        self._conn: pymysql.connections.Connection[Any] | None = None
        self.mariadb = False
        self.version = ""
        self._bounds: dict[str, list[tuple[str | None, int, int]]] = {}

    @property
    def where(self) -> str:
        return f"source {self.source.name} ({self.source.host}:{self.source.port})"

    def connect(self) -> SourceServer:
        try:
            self._conn = mysql.connect(
                self.source,
                autocommit=True,
                connect_timeout=10,
                read_timeout=60,
            )
            version = self.query_one("SELECT VERSION()")
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"connecting to {self.where}") from exc
        self.version = str(version[0]) if version else ""
        self.mariadb = "mariadb" in self.version.lower()
        return self

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(pymysql.MySQLError):
                self._conn.close()
            self._conn = None

    def __enter__(self) -> SourceServer:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _cursor(self, what: str) -> Iterator[Any]:
        if self._conn is None:
            self.connect()
        assert self._conn is not None
        try:
            self._conn.ping()
            with self._conn.cursor() as cur:
                yield cur
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"{what} on {self.where}") from exc

    def query_all(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self._cursor(sql.split(maxsplit=1)[0]) as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def query_one(self, sql: str, args: Any = None) -> tuple[Any, ...] | None:
        rows = self.query_all(sql, args)
        return rows[0] if rows else None

    # ---- start-up checks --------------------------------------------------------------------

    def check(self) -> None:
        """ServerMisconfiguredError with one actionable line if the binlog or a grant is wrong."""
        refused = {s.variable: s for s in REFUSED_SETTINGS}
        names = ", ".join(f"'{n}'" for n in (*_REQUIRED, "binlog_row_metadata", *refused))
        variables = {
            str(k).lower(): str(v).upper()
            for k, v in self.query_all(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        }
        for name, setting in refused.items():
            have = variables.get(name)
            if have is not None and setting.bad(have):
                raise ServerMisconfiguredError(
                    f"{self.where}: {name} is {have}: {setting.consequence}; {setting.fix} "
                    "(SET GLOBAL and in the server configuration)"
                )
        required = dict(_REQUIRED)
        required["binlog_row_metadata"] = "FULL"
        for name, want in required.items():
            have = variables.get(name)
            if have != want:
                flag = "--log-bin" if name == "log_bin" else f"{name}={want}"
                raise ServerMisconfiguredError(
                    f"{self.where}: {name} is {have or 'not set'}, the reader needs {want}: "
                    f"set {flag} in the server configuration and restart it"
                )
        grants = " ".join(str(r[0]) for r in self.query_all("SHOW GRANTS FOR CURRENT_USER()"))
        grants = grants.upper()
        if "ALL PRIVILEGES ON *.*" in grants:
            return
        needed = ["REPLICATION SLAVE"] + (["BINLOG MONITOR"] if self.mariadb else [])
        if not self.mariadb:
            needed.append("REPLICATION CLIENT")
        alt = {"BINLOG MONITOR": ("SUPER", "REPLICATION CLIENT"), "REPLICATION SLAVE": ()}
        missing = [
            g
            for g in needed
            if g not in grants
            and not any(a in grants for a in alt.get(g, ()))
            and not (g == "REPLICATION SLAVE" and "REPLICATION REPLICA" in grants)
        ]
        if missing:
            raise ServerMisconfiguredError(
                f"{self.where}: user {self.source.user} lacks {', '.join(missing)}: {GRANT_HINT}"
            )

    # ---- binlog files and positions ---------------------------------------------------------

    def binary_logs(self) -> list[tuple[str, int]]:
        return [(str(r[0]), int(r[1])) for r in self.query_all("SHOW BINARY LOGS")]

    def master_position(self) -> tuple[str, int]:
        """The server's current binlog position (MySQL 8.4: ``SHOW BINARY LOG STATUS``)."""
        with self._cursor("SHOW MASTER STATUS") as cur:
            row = mysql.binlog_position(cur)
        if not row:
            raise ServerMisconfiguredError(f"{self.where}: binary logging is off; set --log-bin")
        return str(row[0]), int(row[1])

    def identity(self) -> str:
        """Which server this is, for telling its binlog positions from another's: MySQL's
        server_uuid, else (MariaDB has none) ``server_id:N``."""
        if not self.mariadb:
            row = self.query_one("SELECT @@server_uuid")
            if row and row[0]:
                return str(row[0])
        row = self.query_one("SELECT @@server_id")
        return f"server_id:{row[0] if row else 0}"

    def missing_gtids(self, gtid_set: str) -> str:
        """What of `gtid_set` this server has not written to its binlog yet ('' when none)."""
        have, want = self._written_gtids(), parse_gtid_set(gtid_set)
        return ",".join(f"{s}:{n}" for s, n in sorted(want.items()) if have.get(s, 0) < n)

    def holds_exactly(self, gtid_set: str) -> bool:
        """Whether this server's binlog ends, in every stream of `gtid_set`, at that GTID."""
        have, want = self._written_gtids(), parse_gtid_set(gtid_set)
        return bool(want) and all(have.get(s) == n for s, n in want.items())

    def _written_gtids(self) -> dict[str, int]:
        sql = "SELECT @@gtid_binlog_pos" if self.mariadb else "SELECT @@gtid_executed"
        row = self.query_one(sql)
        return parse_gtid_set(str(row[0]) if row and row[0] else "")

    def gtid_at(self, file: str, pos: int) -> str | None:
        """The GTID state at `file:pos` (MariaDB's BINLOG_GTID_POS), None elsewhere."""
        if not self.mariadb:
            return None
        row = self.query_one("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
        return str(row[0]) if row and row[0] is not None else None

    def ensure_available(self, position: BinlogPosition, what: str) -> None:
        """PositionPurgedError naming the oldest position and the choices if it is gone."""
        logs = self.binary_logs()
        names = [n for n, _ in logs]
        if position.file in names:
            return
        oldest = f"{names[0]}:4" if names else "none"
        raise PositionPurgedError(
            f"{self.where}: {what} {position} was purged from the binlog; the oldest available "
            f"position is {oldest}. Choose: start again with reader.start=earliest (changes in "
            "between are lost to subscribers), or take a fresh snapshot and start at its position"
        )

    # ---- live schemas (DDL) -----------------------------------------------------------------

    def table_schema(self, schema: str, table: str) -> TableSchema | None:
        """The table's current schema from information_schema (None if it does not exist)."""
        rows = self.query_all(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_MAXIMUM_LENGTH, "
            "COLLATION_NAME, COLUMN_DEFAULT "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
            "ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        if not rows:
            return None
        cols = []
        for name, data_type, ctype, nullable, prec, scale, fsp, charset, chars, coll, dflt in rows:
            dtype = str(data_type).lower()
            ctype_s = str(ctype).lower()
            elements: tuple[str, ...] = ()
            if dtype in ("enum", "set"):
                elements = tuple(_member(e) for e in _ENUM_ELEMENTS.findall(str(ctype)))
            bits = None
            if dtype == "bit":
                m = re.search(r"\((\d+)\)", ctype_s)
                bits = int(m.group(1)) if m else 1
            if dtype == "longtext" and "json" in ctype_s:
                dtype = "json"
            cols.append(
                ColumnSchema(
                    name=str(name),
                    type=dtype,
                    unsigned="unsigned" in ctype_s,
                    nullable=str(nullable).upper() == "YES",
                    length=bits
                    if dtype == "bit"
                    else (int(chars) if dtype in CHAR_TYPES and chars is not None else None),
                    precision=int(prec) if dtype == "decimal" and prec is not None else None,
                    scale=int(scale) if dtype == "decimal" and scale is not None else None,
                    fsp=int(fsp)
                    if dtype in ("datetime", "timestamp", "time") and fsp is not None
                    else None,
                    charset=str(charset) if charset and charset != "binary" else None,
                    elements=elements,
                    default=None if dflt is None else str(dflt),
                    collation=str(coll) if coll and charset and charset != "binary" else None,
                )
            )
        pk_rows = self.query_all(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, table),
        )
        return TableSchema(
            schema,
            table,
            tuple(cols),
            tuple(str(r[0]) for r in pk_rows),
            self._indexes(schema, table),
        )

    def _indexes(self, schema: str, table: str) -> tuple[IndexSchema, ...]:
        rows = self.query_all(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND INDEX_NAME <> 'PRIMARY' "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        found: dict[str, tuple[list[str], bool]] = {}
        for index, non_unique, column in rows:
            found.setdefault(str(index), ([], not int(non_unique)))[0].append(str(column))
        return tuple(IndexSchema(n, tuple(c), u) for n, (c, u) in sorted(found.items()))

    def create_statements(self, schema: str, table: str) -> list[str]:
        """The table's database's and its own CREATE … IF NOT EXISTS, as the server shows them
        now (a definition published before a table's first streamed row, PROTOCOL.md §9.6)."""
        with self._cursor(f"reading the definition of {schema}.{table}") as cur:
            return create_statements(cur, schema, table)

    def table_extras(self, schema: str, table: str) -> Extras | None:
        """What the table map lacks (defaults, secondary indexes), read now from the server."""
        rows = self.query_all(
            "SELECT COLUMN_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        if not rows:
            return None
        defaults = {str(n): None if d is None else str(d) for n, d in rows}
        found = self.query_one(
            "SELECT TABLE_COLLATION FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        collation = str(found[0]) if found and found[0] else None
        return Extras(defaults, self._indexes(schema, table), collation)

    def cascading_foreign_keys(self) -> list[tuple[str, str, str]]:
        """(child table, parent table, rule) of each foreign key that changes rows itself (ON
        DELETE/UPDATE CASCADE or SET NULL): the server makes those changes below its row
        log, so the binlog — and every consumer — does not see them."""
        rows = self.query_all(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
            "REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE DELETE_RULE IN ('CASCADE', 'SET NULL') OR UPDATE_RULE IN ('CASCADE', 'SET NULL')"
        )
        out = []
        for schema, table, pschema, ptable, on_delete, on_update in rows:
            rule = ", ".join(
                f"ON {what} {r}"
                for what, r in (("DELETE", on_delete), ("UPDATE", on_update))
                if r in ("CASCADE", "SET NULL")
            )
            out.append((f"{schema}.{table}", f"{pschema}.{ptable}", rule))
        return out

    def database_collation(self, database: str) -> str | None:
        """A database's default collation now (None: no such database)."""
        found = self.query_one(
            "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=%s",
            (database,),
        )
        return str(found[0]) if found and found[0] else None

    def charsets(self) -> Charsets:
        """Each charset's default collation (a server fact, read once per term); on MySQL,
        JSON is a type of its own (its table map says json, not longtext)."""
        rows = self.query_all(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS "
            "WHERE IS_DEFAULT='Yes'"
        )
        return Charsets({str(cs): str(coll) for cs, coll in rows}, native_json=not self.mariadb)

    # ---- locating a start position ------------------------------------------------------------

    def locate(self, spec: StartPosition, server_id: int) -> BinlogPosition:
        """The transaction boundary a `StartPosition` names (scans the binlog for gtid or time)."""
        self._bounds.clear()
        if spec.kind == "latest":
            file, pos = self.master_position()
            return BinlogPosition(file, pos, self.gtid_at(file, pos))
        logs = self.binary_logs()
        if not logs:
            raise ServerMisconfiguredError(f"{self.where}: no binary logs; set --log-bin")
        if spec.kind == "earliest":
            return BinlogPosition(logs[0][0], 4, None)
        if spec.kind == "file":
            assert spec.file is not None
            assert spec.offset is not None
            position = BinlogPosition(spec.file, spec.offset, None)
            self.ensure_available(position, "start position")
            return BinlogPosition(spec.file, spec.offset, self.gtid_at(spec.file, spec.offset))
        names = [name for name, _ in logs]
        if spec.kind == "gtid":
            first = self._file_before_gtid(names, _gtid_targets(spec.gtid_set or ""))
        else:
            first = self._file_before_time(names, spec.timestamp_s or 0, server_id)
        return self._scan(spec, first, server_id)

    def _file_before_gtid(self, names: list[str], targets: set[str]) -> str:
        """The last binlog file whose starting GTID state lacks one of `targets` (MariaDB;
        elsewhere the oldest file)."""
        if not self.mariadb or not all(is_mariadb_gtid(t) for t in targets):
            return names[0]
        for name in reversed(names):
            state = GtidState(self.gtid_at(name, 4))
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

    def statements(self, name: str, until: int) -> list[tuple[str, str]]:
        """(default schema, statement) of the statement events of binlog file `name` ending
        before offset `until` (-1: the whole file), from ``SHOW BINLOG EVENTS`` (the server's
        own parse; what `rowbus.producer.online_ddl` reads back a ghost table's ALTERs from)."""
        out: list[tuple[str, str]] = []
        for _, _, raw_kind, _, end, raw_info in self.query_all(f"SHOW BINLOG EVENTS IN '{name}'"):
            if 0 <= until <= int(end):
                break
            if str(raw_kind) != "Query":
                continue
            info = str(raw_info or "")
            used = _USE_INFO.match(info)
            out.append((used.group(1).replace("``", "`"), used.group(2)) if used else ("", info))
        return out

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
        for _, pos, raw_kind, _, end, raw_info in self.query_all(f"SHOW BINLOG EVENTS IN '{name}'"):
            kind, info = str(raw_kind), str(raw_info or "")
            if kind in ("Gtid", "Gtid_tagged"):
                m = _GTID_INFO.search(info)
                gtid = m.group(1).lower() if m else None  # as `_gtid_targets` spells them
                start = int(pos)
                # An XA group opens like BEGIN and ends at its XA_prepare event.
                opened = info.startswith(("BEGIN", "XA START"))
                standalone = not opened and self.mariadb
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
            self.source,
            server_id,
            name,
            pos,
            TableFilter(system_schemas=["*"]),
            blocking=False,
            only_events=TRANSACTION_EVENTS,
        )

    def _scan(self, spec: StartPosition, first: str, server_id: int) -> BinlogPosition:
        """Walk transaction boundaries from file `first` on (binary search for a timestamp)."""
        names = [n for n, _ in self.binary_logs()]
        files = names[names.index(first) :] if first in names else names
        if spec.kind == "gtid":
            targets = _gtid_targets(spec.gtid_set or "")
            for name in files:
                for gtid, _, end in self.boundaries(name):
                    if gtid in targets:
                        targets.discard(gtid)
                        if not targets:
                            return BinlogPosition(name, end, self.gtid_at(name, end) or gtid)
            raise BadStartPositionError(
                f"{self.where}: GTID {spec.gtid_set} is not in the binlog (oldest file {first}); "
                "start from earliest, latest or a file:pos instead"
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
            return BinlogPosition(name, pos, self.gtid_at(name, pos))
        file, pos = self.master_position()
        return BinlogPosition(file, pos, self.gtid_at(file, pos))


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
