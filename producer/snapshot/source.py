"""Consistent, lock-free read views of a MariaDB source, primary-key chunk reads, and keyless
tables streamed in bounded chunks.

``START TRANSACTION WITH CONSISTENT SNAPSHOT`` gives a read view and, in the session status
``binlog_snapshot_file``/``binlog_snapshot_position``, the exact binlog position it shows
(ENVIRONMENT.md: ``SHOW MASTER STATUS`` read at the same moment may be ahead). Parallel reads
need every connection's view at the *same* position; MariaDB cannot share one view between
sessions, so `open_views` opens the others and keeps a view only when its position equals the
first one's (no commit in between), retrying a few times: no lock is ever taken. Under heavy
writes fewer views may agree, and the snapshot runs on fewer connections (at least one).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Iterator
from typing import Any

import pymysql

from rowbus.clients import mysql
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.clients.settings import SourceConnection
from rowbus.producer.binlog import translate_mysql_error
from rowbus.producer.definitions import create_statements
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.snapshot import resultset
from rowbus.producer.snapshot.values import CONVERSIONS, post_converters, select_expression
from rowbus.producer.tables import TableFilter
from rowbus.protocol.events import BinlogPosition, TableSchema
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

ALIGN_ATTEMPTS = 20
KEYLESS_WRITE_TIMEOUT_S = 3600
"""How long the server may wait on a keyless table's scan while its chunks are published."""


class ReadView:
    """One connection inside a consistent-snapshot transaction at `position`."""

    def __init__(self, conn: Any, position: BinlogPosition, where: str) -> None:
        self.conn = conn
        self.position = position
        self.where = where

    def renew(self) -> None:
        """A fresh read view on the same connection, at the server's position now."""
        try:
            self.conn.rollback()
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"ending a read view on {self.where}") from exc
        _begin(self.conn, self.where)
        self.position = _position(self.conn, self.where)

    def end(self) -> None:
        """End the read view (the connection stays): no MVCC view is held between chunks."""
        try:
            self.conn.rollback()
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"ending a read view on {self.where}") from exc

    def close(self) -> None:
        with contextlib.suppress(pymysql.MySQLError, OSError):
            self.conn.rollback()
        with contextlib.suppress(pymysql.MySQLError, OSError):
            self.conn.close()

    @contextlib.contextmanager
    def cursor(self, what: str) -> Iterator[Any]:
        try:
            with self.conn.cursor() as cur:
                yield cur
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"{what} on {self.where}") from exc

    def read_chunk(
        self,
        table: TableSchema,
        after: tuple[Value, ...] | None,
        limit: int,
    ) -> list[tuple[Value, ...]]:
        """Up to `limit` rows of `table` with a primary key above `after`, in key order; a
        table without one is read whole (see `keyless_chunks` for bounded chunks of it)."""
        cols = ", ".join(select_expression(c) for c in table.columns)
        if not table.primary_key:
            return self._read_all(table, cols)
        keys = [f"`{k.replace('`', '``')}`" for k in table.primary_key]
        name = f"`{table.schema.replace('`', '``')}`.`{table.table.replace('`', '``')}`"
        where, args = "", list[Value]()
        if after is not None:
            # (a > x) OR (a = x AND b > y) ...: a range on the primary key the optimizer uses
            # (a row constructor comparison is not always one).
            terms = []
            for i in range(len(keys)):
                eq = [f"{k} = %s" for k in keys[:i]]
                terms.append("(" + " AND ".join([*eq, f"{keys[i]} > %s"]) + ")")
                args.extend(after[: i + 1])
            where = " WHERE " + " OR ".join(terms)
        sql = f"SELECT {cols} FROM {name}{where} ORDER BY {', '.join(keys)} LIMIT {int(limit)}"
        return self._select(table, sql, args)

    def keyless_chunks(
        self, table: TableSchema, limit: int
    ) -> Generator[tuple[list[tuple[Value, ...]], bool]]:
        """The rows of a table without a primary key, in chunks of `limit` rows (the last holds
        the rest), each with whether it is the last, from one streaming SELECT in this read
        view: no key orders them, so one scan is cut (PROTOCOL.md §9.7); a resumed snapshot
        reads the table again from its start at its new view. The connection serves nothing
        else until the chunks are exhausted; a generator closed early closes it."""
        cols = ", ".join(select_expression(c) for c in table.columns)
        sql = f"SELECT {cols} FROM {_name(table)}"
        try:
            with self.conn.cursor() as cur:
                # The server waits while the chunks already read are published: without this it
                # aborts the scan after net_write_timeout (60 s by default) of a full socket.
                cur.execute(f"SET SESSION net_write_timeout = {KEYLESS_WRITE_TIMEOUT_S}")
            yield from resultset.stream(self.conn, sql, [], post_converters(table.columns), limit)
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"reading {table.qualified} on {self.where}") from exc

    def _read_all(self, table: TableSchema, cols: str) -> list[tuple[Value, ...]]:
        return self._select(table, f"SELECT {cols} FROM {_name(table)}", [])

    def _select(self, table: TableSchema, sql: str, args: list[Value]) -> list[tuple[Value, ...]]:
        try:
            return resultset.select(self.conn, sql, args, post_converters(table.columns))
        except pymysql.MySQLError as exc:
            raise translate_mysql_error(exc, f"reading {table.qualified} on {self.where}") from exc

    def create_statements(self, table: TableSchema) -> list[str]:
        """What creates `table` where it is missing: its database's and its own CREATE, each
        with IF NOT EXISTS, as the server shows them (the DDL a consumer runs before the
        table's snapshot rows, so an empty sink can take a snapshot)."""
        with self.cursor(f"reading the definition of {table.qualified}") as cur:
            return create_statements(cur, table.schema, table.table)


def _name(table: TableSchema) -> str:
    return f"`{table.schema.replace('`', '``')}`.`{table.table.replace('`', '``')}`"


def _connect(source: SourceConnection, where: str) -> Any:
    try:
        conn = mysql.connect(
            source, autocommit=False, connect_timeout=10, read_timeout=600, conv=CONVERSIONS
        )
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    except pymysql.MySQLError as exc:
        raise translate_mysql_error(exc, f"connecting for a snapshot to {where}") from exc
    return conn


def _begin(conn: Any, where: str) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
    except pymysql.MySQLError as exc:
        raise translate_mysql_error(exc, f"opening a snapshot read view on {where}") from exc


def _position(conn: Any, where: str) -> BinlogPosition:
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            file = status.get("binlog_snapshot_file", "")
            pos = int(status.get("binlog_snapshot_position", "0") or 0)
            if not file:
                raise ServerMisconfiguredError(
                    f"{where}: no binlog_snapshot_file in the session status: a lock-free "
                    "consistent snapshot needs MariaDB with the binary log on"
                )
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
            row = cur.fetchone()
            gtid = str(row[0]) if row and row[0] else None
    except pymysql.MySQLError as exc:
        raise translate_mysql_error(exc, f"reading the snapshot position on {where}") from exc
    return BinlogPosition(file, pos, gtid)


def open_views(source: SourceConnection, count: int, where: str) -> list[ReadView]:
    """Up to `count` read views all at one binlog position; at least one.

    The connections are made first, then their transactions started back to back, so the
    window in which a commit would split them is a few round trips; the largest group at one
    position is kept (of `ALIGN_ATTEMPTS` tries, the first that has all of them)."""
    best: list[ReadView] = []
    for attempt in range(ALIGN_ATTEMPTS if count > 1 else 1):
        conns = [_connect(source, where) for _ in range(count)]
        try:
            for conn in conns:
                _begin(conn, where)
            views = [ReadView(c, _position(c, where), where) for c in conns]
        except BaseException:
            for conn in conns:
                with contextlib.suppress(pymysql.MySQLError, OSError):
                    conn.close()
            raise
        groups: dict[BinlogPosition, list[ReadView]] = {}
        for v in views:
            groups.setdefault(v.position, []).append(v)
        group = max(groups.values(), key=len)
        for v in views:
            if v not in group:
                v.close()
        if len(group) > len(best):
            for v in best:
                v.close()
            best = group
        else:
            for v in group:
                v.close()
        if len(best) == count:
            break
        log.debug("%s: read views split by a commit (attempt %d)", where, attempt + 1)
    log.info(
        "%s: %d of %d consistent read view(s) at binlog %s",
        where,
        len(best),
        count,
        best[0].position,
    )
    return best


def list_tables(view: ReadView, table_filter: TableFilter) -> list[tuple[str, str, int]]:
    """The base tables the filter wants, with the server's row estimate."""
    with view.cursor("listing tables") as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(TABLE_ROWS, 0) "
            "FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        rows = [(str(s), str(t), int(n)) for s, t, n in cur.fetchall()]
    return [(s, t, n) for s, t, n in rows if s not in SYSTEM_SCHEMAS and table_filter.wanted(s, t)]
