"""An upstream DDL, retargeted by the router and executed in the sink exactly once.

Exactly once without comparing columns: every DDL goes through the shard-DDL executor's marker
(`rowbus.shard_ddl.executor.DdlExecutor`) under an id made of the job and the DDL's
order key (source, binlog file, offset, index). MySQL commits DDL implicitly, so the marker
cannot be committed with it; the executor writes an *intent* row holding ``SHOW CREATE TABLE``
of every target the statement touches (a missing table reads as empty), runs the statement, then
marks the row done. Replaying after a crash:

- marker done → the statement ran; nothing to do;
- marker executing and the recorded definitions differ from the sink's now → the statement ran
  (MariaDB ≥ 10.6 DDL is atomic: it ran whole or not at all); mark done;
- marker executing and the definitions are the same → the statement did not run, or it is one
  whose effect ``SHOW CREATE TABLE`` does not show (TRUNCATE; a no-op ALTER such as FORCE). Run
  it again: this happens at the DDL's barrier, before any row after it is applied (the apply
  head's phase is ``rows``), so TRUNCATE again empties the same rows, and a no-op stays one.

So TRUNCATE, MODIFY of a type or length, key, index and charset changes all run (the previous
rule — "already applied when the target's column names equal the after-schema's" — skipped them).

What runs downstream: table statements with every table name retargeted to its route's target
(RENAME of several tables, DROP of several, CREATE … LIKE included). Not applied (logged): a
statement touching a sharded route (shard-DDL coordination owns those) or a skipped table, and
database statements unless the route keeps the database name (``{schema}`` → the same name):
a renamed or merged target database may hold other sources' tables. A CREATE of a table the
sink already had before the job (error 1050), a DROP of one it does not have (1051, 1008) and a
CREATE DATABASE of an existing one (1007) are logged and passed over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rowbus.protocol.ddl import (
    DdlKind,
    DdlParseError,
    ParsedDdl,
    TableName,
    parse_ddl,
    quote,
    retarget,
    retarget_database,
)
from rowbus.protocol.events import DdlChange, order_key
from rowbus.routing.exceptions import RoutingError
from rowbus.routing.routes import Router
from rowbus.shard_ddl.ddl import coordinated
from rowbus.shard_ddl.exceptions import DownstreamDdlError
from rowbus.shard_ddl.executor import DdlExecutor
from rowbus.spark_apply.exceptions import BadEventError

log = logging.getLogger(__name__)

_ALREADY = {
    1051: "DROP",  # unknown table: a DROP whose target is gone
    1050: "CREATE",  # table exists: created in the sink before the job (logged)
    1007: "CREATE",  # database exists
    1008: "DROP",  # database does not exist
}
"""Errors that say a statement's effect is already in the sink (target created before the job
started, or the statement ran before a crash): logged, not a failure."""


class SinkDdl:
    """Plans and runs upstream DDL in the sink (see the module docstring)."""

    def __init__(
        self, router: Router, connect: Callable[[], Any], state_database: str, job: str
    ) -> None:
        self._router = router
        self._executor = DdlExecutor(connect, state_database)
        self._connect = connect
        self._job = job

    def marker_id(self, ev: DdlChange) -> str:
        upstream, _number, file, offset, index = order_key(ev)
        # Ids of DDLs before any upstream switch (upstream 0) keep their pre-1.2 form.
        where = f"{file}:{offset}:{index}" + (f"@{upstream}" if upstream else "")
        return f"apply/{self._job}/{ev.source}/{where}"

    def plan(self, ev: DdlChange) -> tuple[str, list[str], bool] | None:
        """(statement for the sink, targets it touches, whether it creates a table), or None
        when the statement is not applied downstream (logged)."""
        try:
            parsed = parse_ddl(ev.statement, ev.schema)
        except DdlParseError as exc:
            raise BadEventError(
                f"unreadable DDL ({exc}): {ev.statement}", str(ev.position)
            ) from exc
        if parsed.temporary or parsed.kind is DdlKind.OTHER:
            log.info("%s: not a table DDL, not applied: %s", ev.position, ev.statement[:200])
            return None
        if parsed.database is not None or parsed.kind is DdlKind.ALTER_DATABASE:
            return self._plan_database(ev, parsed)
        targets: dict[TableName, TableName] = {}
        try:
            for name in parsed.tables:
                target = self._router.target(name.schema, name.table, ev.source)
                if target is None or self._router.sharded(name.schema, name.table, ev.source):
                    _not_applied(ev, str(name), target is not None)
                    return None
                targets[name] = TableName(target.schema, target.table)
        except RoutingError as exc:
            raise BadEventError(f"bad routing: {exc}", str(ev.position)) from exc
        sql = retarget(parsed, targets.get)
        touched = [str(targets[n]) for n in dict.fromkeys(parsed.tables) if n != parsed.like]
        creates = parsed.kind in (DdlKind.CREATE_TABLE, DdlKind.CREATE_TABLE_LIKE) or bool(
            parsed.renames
        )
        return sql, touched, creates

    def _plan_database(
        self, ev: DdlChange, parsed: ParsedDdl
    ) -> tuple[str, list[str], bool] | None:
        db = parsed.database or ev.schema
        try:
            target = self._router.target(db, "\x00", ev.source)
        except RoutingError as exc:
            raise BadEventError(f"bad routing: {exc}", str(ev.position)) from exc
        if target is None or target.schema != db or self._router.sharded(db, "\x00", ev.source):
            log.warning(
                "%s: database DDL of %s is not applied: its route does not keep the database "
                "name: %s",
                ev.position,
                db,
                ev.statement[:200],
            )
            return None
        return retarget_database(parsed, target.schema), [], False

    def apply(self, ev: DdlChange) -> bool:
        """Run `ev` in the sink unless it ran already; whether it ran now."""
        planned = self.plan(ev)
        if planned is None:
            return False
        sql, touched, creates = planned
        try:
            if creates:
                self._ensure_databases(touched)
            outcome = self._executor.execute(self.marker_id(ev), touched, sql, ev.session)
        except DownstreamDdlError as exc:
            head = _ALREADY.get(exc.code or 0)
            if head is not None and sql.lstrip().upper().startswith(head):
                log.warning("%s: already so in the sink (%s): %s", ev.position, exc, sql[:200])
                return False
            raise BadEventError(f"DDL failed in the sink: {exc}", str(ev.position)) from exc
        log.info(
            "%s: DDL %s: %s",
            ev.position,
            "applied" if outcome.executed else "already applied (marker)",
            sql[:200],
        )
        return outcome.executed

    def _ensure_databases(self, targets: list[str]) -> None:
        """A CREATE (or RENAME into) a target database the sink does not have yet."""
        conn = self._connect()
        with conn, conn.cursor() as cur:
            for schema in {t.partition(".")[0] for t in targets}:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(schema)}")


def _not_applied(ev: DdlChange, name: str, sharded: bool) -> None:
    """Logs why a DDL of an unrouted or sharded table is not applied here. A sharded table's
    ALTER TABLE or CREATE/DROP INDEX is applied, once, by the shard-DDL coordination (the
    job's hook runs whenever a route is sharded): saying "not applied" then misleads."""
    if sharded and coordinated(ev.statement):
        log.info(
            "%s: DDL of shard %s is coordinated with its group's other shards (applied once "
            "all reached it): %s",
            ev.position,
            name,
            ev.statement[:200],
        )
        return
    log.warning(
        "%s: DDL touches %s, which is %s: not applied downstream%s: %s",
        ev.position,
        name,
        "sharded" if sharded else "skipped",
        " (of a sharded table only ALTER TABLE and CREATE/DROP INDEX are coordinated)"
        if sharded
        else "",
        ev.statement[:200],
    )
