"""Execute a lock's DDL on the sink exactly once, across crashes.

DDL is not transactional in MySQL, so "executed" cannot be committed together with a marker.
Instead the marker table ``<state_database>.shard_ddl_applied`` (one row per lock id) is written
in two steps around the statement:

1. row absent → insert it as ``executing`` with the target's ``SHOW CREATE TABLE`` before;
2. execute the statement;
3. mark the row ``done``.

After a crash the owner finds the row: ``done`` → nothing to do; ``executing`` → the statement
ran iff the target's definition differs from the one recorded before it, so it is either marked
done or executed again. The owner publishes DONE only after step 3; a crash between 3 and the
DONE record is covered by step "done → nothing to do" (DONE carries ``already``).

pymysql errors are translated here into `DownstreamDdlError` (keeping the MySQL error code).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pymysql

from rowbus.protocol.events import UNKNOWN, StatementSession
from rowbus.shard_ddl.ddl import quote
from rowbus.shard_ddl.exceptions import DownstreamDdlError

log = logging.getLogger(__name__)

_MISSING = (1146, 1049)  # no such table, no such database

Connect = Callable[[], Any]
"""Returns a new autocommit pymysql connection to the sink."""


@dataclass(frozen=True, slots=True)
class Outcome:
    executed: bool
    """False: the sink already had this lock's DDL (a retry after a crash)."""


class SinkDdl(Protocol):
    """What the coordinator asks of the sink a lock's DDL goes to: `DdlExecutor` for a MySQL
    sink (the apply job's Iceberg sink has its own, `spark_apply.shard_ddl.IcebergLockDdl`)."""

    def execute(
        self,
        lock_id: str,
        target: str | Sequence[str],
        statement: str,
        session: StatementSession = UNKNOWN,
    ) -> Outcome:
        """Apply `statement` to `target` once for `lock_id`, across crashes."""

    def column_types(self, target: str) -> dict[str, str]:
        """Upper-case column name → its type in the target (optimistic mode's check)."""


ER_WRONG_VALUE_FOR_VAR = 1231


def _set_sql_mode(cur: Any, sql_mode: str, lock_id: str) -> None:
    """The session's sql_mode set to the source's; a mode this server does not know (the
    source is another flavour or version) is left out, with a warning naming it."""
    try:
        cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
        return
    except pymysql.MySQLError as exc:
        if not exc.args or exc.args[0] != ER_WRONG_VALUE_FOR_VAR:
            raise
    known, unknown = [], []
    for name in filter(None, sql_mode.split(",")):
        try:
            cur.execute("SET SESSION sql_mode = %s", (name,))
            known.append(name)
        except pymysql.MySQLError:
            unknown.append(name)
    log.warning("lock %s: the sink does not know sql_mode %s", lock_id, ",".join(unknown))
    cur.execute("SET SESSION sql_mode = %s", (",".join(known),))


class DdlExecutor:
    def __init__(self, connect: Connect, state_database: str = "rowbus_shard_ddl") -> None:
        self._connect = connect
        self._db = state_database
        self._table = f"{quote(state_database)}.`shard_ddl_applied`"
        self._ready = False

    def _setup(self, cur: Any) -> None:
        if self._ready:
            return
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(self._db)}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            " lock_id VARCHAR(255) PRIMARY KEY,"
            " statement TEXT NOT NULL,"
            " state VARCHAR(16) NOT NULL,"
            " before_definition MEDIUMTEXT,"
            " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
        )
        self._ready = True

    def execute(
        self,
        lock_id: str,
        target: str | Sequence[str],
        statement: str,
        session: StatementSession = UNKNOWN,
    ) -> Outcome:
        """Run `statement` (which changes `target`, ``schema.table``, or several such tables)
        once for `lock_id`, under the source's `session` (its sql_mode, time and time zone,
        each where known; the sink's own otherwise)."""
        try:
            conn = self._connect()
            with conn, conn.cursor() as cur:
                self._setup(cur)
                return self._execute(cur, lock_id, target, statement, session)
        except pymysql.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            raise DownstreamDdlError(
                f"executing {statement!r} for lock {lock_id} on the sink: {exc}", code=code
            ) from exc

    def _execute(
        self,
        cur: Any,
        lock_id: str,
        target: str | Sequence[str],
        statement: str,
        session: StatementSession,
    ) -> Outcome:
        cur.execute(
            f"SELECT state, before_definition FROM {self._table} WHERE lock_id=%s", (lock_id,)
        )
        row = cur.fetchone()
        if row is not None and row[0] == "done":
            log.info("lock %s: DDL already applied in the sink", lock_id)
            return Outcome(executed=False)
        current = self._definition(cur, target)
        if row is not None and row[1] != current:
            log.info("lock %s: the sink ran the DDL before a crash; marking it done", lock_id)
            self._mark_done(cur, lock_id)
            return Outcome(executed=False)
        if row is None:
            cur.execute(
                f"INSERT INTO {self._table} (lock_id, statement, state, before_definition) "
                "VALUES (%s, %s, 'executing', %s)",
                (lock_id, statement, current),
            )
        log.info("lock %s: executing on the sink: %s", lock_id, statement)
        sql_mode, timestamp_us, time_zone = (
            session.sql_mode,
            session.timestamp_us,
            session.time_zone,
        )
        if sql_mode is not None:
            cur.execute("SET @rowbus_sql_mode = @@SESSION.sql_mode")
            _set_sql_mode(cur, sql_mode, lock_id)
        if timestamp_us is not None:
            # CURRENT_TIMESTAMP / NOW(6) defaults fill old rows with the source's moment.
            seconds, micros = divmod(timestamp_us, 1_000_000)
            cur.execute(f"SET TIMESTAMP = {seconds}.{micros:06d}")
        if time_zone is not None:
            # ... and a DATETIME takes that moment (or a time literal its instant) in the
            # source session's zone, not the sink connection's.
            cur.execute("SET @rowbus_time_zone = @@SESSION.time_zone")
            cur.execute("SET SESSION time_zone = %s", (time_zone,))
        try:
            cur.execute(statement)
        finally:
            if time_zone is not None:
                cur.execute("SET SESSION time_zone = @rowbus_time_zone")
            if timestamp_us is not None:
                cur.execute("SET TIMESTAMP = DEFAULT")
            if sql_mode is not None:
                cur.execute("SET SESSION sql_mode = @rowbus_sql_mode")
        self._mark_done(cur, lock_id)
        return Outcome(executed=True)

    def _mark_done(self, cur: Any, lock_id: str) -> None:
        cur.execute(
            f"UPDATE {self._table} SET state='done', updated_at=CURRENT_TIMESTAMP(6) "
            "WHERE lock_id=%s",
            (lock_id,),
        )

    @staticmethod
    def _definition(cur: Any, target: str | Sequence[str]) -> str:
        """``SHOW CREATE TABLE`` of each target, joined; a missing table (or database) reads as
        empty, so CREATE, DROP and RENAME change the definition too."""
        parts = []
        for one in [target] if isinstance(target, str) else target:
            schema, _, table = one.partition(".")
            try:
                cur.execute(f"SHOW CREATE TABLE {quote(schema)}.{quote(table)}")
                row = cur.fetchone()
            except pymysql.MySQLError as exc:
                if not exc.args or exc.args[0] not in _MISSING:
                    raise
                row = None
            parts.append(str(row[1]) if row else "")
        return "\n;\n".join(parts)

    def column_types(self, target: str) -> dict[str, str]:
        """Upper-case column name → its COLUMN_TYPE in the target (for optimistic mode)."""
        schema, _, table = target.partition(".")
        try:
            conn = self._connect()
            with conn, conn.cursor() as cur:
                cur.execute(
                    "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                    (schema, table),
                )
                return {str(n).upper(): str(t).upper() for n, t in cur.fetchall()}
        except pymysql.MySQLError as exc:
            raise DownstreamDdlError(f"reading the columns of {target}: {exc}") from exc
