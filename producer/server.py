"""Plain SQL against the source server: start-up checks, binlog files, positions.

`SourceServer` holds the control connection; its parts, one job each, use it: `catalog` (the
live tables, `rowbus.producer.catalog`) and `locator` (start positions located in the binlog,
`rowbus.producer.locator`). Every pymysql failure is translated into a `ReaderError` here or in
`rowbus.producer.binlog`.
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
from rowbus.producer.binlog import (
    GRANT_HINT,
    translate_mysql_error,
)
from rowbus.producer.catalog import SourceCatalog
from rowbus.producer.eventtypes import REFUSED_SETTINGS
from rowbus.producer.exceptions import (
    PositionPurgedError,
    ServerMisconfiguredError,
)
from rowbus.producer.locator import StartLocator
from rowbus.protocol.events import BinlogPosition
from rowbus.protocol.positions import parse_gtid_set

log = logging.getLogger(__name__)

_REQUIRED = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
_USE_INFO = re.compile(r"use `((?:[^`]|``)*)`; (.*)", re.DOTALL)
"""A statement event's Info in SHOW BINLOG EVENTS: its default schema, then the statement."""


class SourceServer:
    """A control connection to one source. Construct, `connect()`, use, `close()`."""

    def __init__(self, source: SourceConnection) -> None:
        self.source = source
        self._conn: pymysql.connections.Connection[Any] | None = None
        self.mariadb = False
        self.version = ""
        self.catalog = SourceCatalog(self)
        """Its live tables (information_schema)."""
        self.locator = StartLocator(self)
        """Start positions located in its binlog."""

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
    def cursor(self, what: str) -> Iterator[Any]:
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
        with self.cursor(sql.split(maxsplit=1)[0]) as cur:
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
        with self.cursor("SHOW MASTER STATUS") as cur:
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
