"""A step's collapsed changes (`changes.TableChanges`) written as SQL on a sink connection.

`write_table` runs one table's deletes, upserts and keyless statements on a cursor; the
driver's writes (`sink`, parallel mode's shards on the driver) and the executors' (parallel
mode's `shard_writes`, throughput mode's write tasks) all go through it. `write_tables` is the
driver's: on a failure the server calls the event's fault (a missing table, a column too
narrow), it replays the tables key by key to name the event's position (`diagnose`).
"""

from __future__ import annotations

import logging
from typing import Any

import pymysql
from pymysql.connections import Connection

from rowbus.clients import mysql
from rowbus.protocol.values import Value
from rowbus.routing.routes import Target
from rowbus.spark_apply import enum_error
from rowbus.spark_apply.changes import (
    STATEMENT_BYTES,
    TableChanges,
    delete_statements,
    keyless_statements,
)
from rowbus.spark_apply.exceptions import ApplyError, BadEventError, SinkFullError
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.sink_conn import address, apply_error, room_for
from rowbus.spark_apply.snapshots import SeenSets

log = logging.getLogger(__name__)


def write_tables(
    conn: Connection[Any],
    tables: dict[Target, TableChanges],
    statement_bytes: int,
    seen: SeenSets | None,
) -> None:
    """Write `tables` in the connection's open transaction, with their keys added to the
    running snapshots' seen sets when `seen` is given; on a failure roll back and raise the
    apply job's error (naming the event when the statement failed on one)."""
    try:
        with conn.cursor() as cur:
            for tc in tables.values():
                write_table(cur, tc, statement_bytes)
                if seen is not None and seen.running:
                    rows = ((c, v) for c, v, _ in tc.upserts.values())
                    seen.add(cur, tc.target, rows, statement_bytes)
    except SinkFullError:
        conn.rollback()  # nothing of the step stays: a restarted job writes it whole
        raise
    except pymysql.err.MySQLError as exc:
        conn.rollback()
        if mysql.classify(exc) is not mysql.Kind.OTHER:
            raise apply_error(exc, "writing rows", address(conn)) from exc
        raise diagnose(conn, tables, exc) from exc


def diagnose(
    conn: Connection[Any],
    tables: dict[Target, TableChanges],
    error: pymysql.err.MySQLError,
) -> ApplyError:
    """Find the event a failed statement stumbled on, by replaying key by key (then roll
    back): the error names its position and the reason."""
    try:
        with conn.cursor() as cur:
            for tc in tables.values():
                for key, (cols, env) in tc.deletes.items():
                    one = TableChanges(tc.target, tc.key_columns, deletes={key: (cols, env)})
                    _try_one(cur, one, env)
                for key, entry in tc.upserts.items():
                    one = TableChanges(tc.target, tc.key_columns, upserts={key: entry})
                    if key in tc.clear:
                        one.clear[key] = tc.clear[key]
                    _try_one(cur, one, entry[2])
                for change in tc.ordered:
                    one = TableChanges(tc.target, tc.key_columns, ordered=[change])
                    _try_one(cur, one, change.env)
    except BadEventError as bad:
        return bad
    finally:
        conn.rollback()
    return ApplyError(f"applying a batch failed: {error}")


def write_table(cur: Any, tc: TableChanges, max_bytes: int = STATEMENT_BYTES) -> None:
    with room_for(cur, tc.target):
        _write_table(cur, tc, max_bytes)


def _write_table(cur: Any, tc: TableChanges, max_bytes: int) -> None:
    by_cols: dict[tuple[str, ...], list[tuple[Value, ...]]] = {}
    for key, (cols, _env) in (tc.deletes | tc.clear).items():
        by_cols.setdefault(cols, []).append(key)
    for cols, keys in by_cols.items():
        for sql in delete_statements(tc.target, cols, keys, max_bytes, rendered=True):
            cur.execute(sql)
    groups: dict[tuple[str, ...], list[tuple[Value, ...]]] = {}
    for _key, (cols, values, _env) in tc.upserts.items():
        groups.setdefault(cols, []).append(values)
    for cols, rows in groups.items():
        enum_error.upsert(cur, tc.target, cols, tc.key_columns, rows, max_bytes)
    for sql in keyless_statements(tc.target, tc.ordered, rendered=True):
        if cur.execute(sql) == 0:
            # The sink does not hold the row the source changed: it drifted (or was edited).
            log.warning("%s: no row matched: %s", tc.target, sql[:300])


def _try_one(cur: Any, one: TableChanges, env: Envelope) -> None:
    try:
        cur.execute("SAVEPOINT one")
        write_table(cur, one)
        cur.execute("RELEASE SAVEPOINT one")
    except pymysql.err.MySQLError as exc:
        code = int(exc.args[0]) if exc.args else 0
        reason = {1146: "missing target table", 1054: "target has no such column"}.get(
            code, "cannot apply"
        )
        raise BadEventError(f"{reason} {one.target}: {exc}", env.position) from exc
