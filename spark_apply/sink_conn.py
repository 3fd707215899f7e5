"""The sink's connections and their failures, shared by every writer of the sink.

`connect_sink` opens a connection as every write expects it, `db_errors` is the one place a
pymysql error becomes the apply job's (keeping the MySQL seam's classification: unavailable,
rolled back, denied), and `retry_conflicts` runs a transaction the sink rolled back for a
deadlock or a lock wait timeout again, a bounded number of times. Used by the driver's sink
(`sink`, `ledger`), by parallel mode's shard transactions on the executors (`shard_writes`)
and by throughput mode's write tasks; it imports none of them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
from pymysql.connections import Connection

from rowbus.clients import mysql
from rowbus.spark_apply.exceptions import (
    ApplyError,
    SinkFullError,
    SinkUnavailableError,
    TransactionConflictError,
)
from rowbus.spark_apply.settings import SinkConnection

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5


def connect_sink(c: SinkConnection) -> Connection[Any]:
    """A sink connection as every write expects it: no autocommit, UTC, strict, no foreign
    key checks.

    Foreign keys are not checked in the sink (as DM does downstream): the source checked them,
    and a batch writes its rows grouped by table and key, not in the source's statement order,
    so a check could refuse a state the source had a moment later; and a table is created
    before the table it references when a snapshot or a route orders them so. Cascaded
    changes are not in the binlog (the server makes them below its row log), so they do not
    reach the sink either way: README "Foreign keys"."""
    with db_errors(f"connecting to the sink {c.host}:{c.port}"):
        conn = mysql.connect(c, autocommit=False, connect_timeout=10, charset="utf8mb4")
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO'")
            cur.execute("SET SESSION foreign_key_checks = 0")
        conn.commit()
    return conn


def precheck_sink(c: SinkConnection) -> None:
    """Refuse a sink that would refuse the job (a wrong user or password, TLS that cannot be
    agreed) before Spark spends seconds starting. One that cannot be reached now is not
    refused: the job waits for it as for a sink that goes away later (`recovery`)."""
    try:
        connect_sink(c).close()
    except SinkUnavailableError:
        log.info("the sink %s:%d does not answer yet; the job waits for it", c.host, c.port)


@contextlib.contextmanager
def db_errors(what: str, sink: str | None = None) -> Iterator[None]:
    """Translate pymysql errors (the one choke point), keeping their codes; `sink`: the
    server's address, for the errors that name it."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        raise apply_error(exc, what, sink) from exc


def apply_error(exc: BaseException, what: str, sink: str | None = None) -> ApplyError:
    """The apply job's error for a sink failure, by the MySQL seam's classification (`sink`:
    the server's address, named when the server ran out of space)."""
    kind = mysql.classify(exc)
    if kind is mysql.Kind.FULL:
        return full_error(exc, what, sink)
    if kind is mysql.Kind.UNAVAILABLE:
        return SinkUnavailableError(f"{what}: sink unavailable ({exc})")
    if kind is mysql.Kind.ROLLED_BACK:  # lock wait timeout, deadlock: run the transaction again
        return TransactionConflictError(f"{what}: {exc}")
    if kind is mysql.Kind.DENIED:
        advice = mysql.wrong_login(exc, "the sink") or (
            "grant it to the sink's user (the job creates apply.state_database and its tables, "
            "and writes the target tables)"
        )
        text = exc.args[1] if len(exc.args) > 1 else exc
        return ApplyError(f"{what}: access denied ({text}); {advice}")
    return ApplyError(f"{what}: {exc}")


def full_error(exc: BaseException, what: str, sink: str | None) -> SinkFullError:
    """One line for a write the sink has no room for: what was written, the server and its
    own words (which name the table), and what to change. The write's transaction is rolled
    back (the caller's, or the server's when the connection closes), so nothing is
    half-applied and a job started once there is room resumes from the sink's head."""
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    text = f"{args[0]}: {args[1]}" if len(args) > 1 else str(exc)
    where = f"the sink {sink}" if sink else "the sink"
    return SinkFullError(
        f"{what}: {where} has no room for it ({text}): free space on its disk, or raise its "
        "cap (innodb_data_file_path's max, a quota on its data folder), then start the job "
        "again; the transaction was rolled back and resumes from the sink's last checkpoint"
    )


@contextlib.contextmanager
def room_for(cur: Any, target: object) -> Iterator[None]:
    """Around the statements that write `target`'s rows on `cur`: a sink with no room for them
    is one `SinkFullError` naming the table and the server (its own message names only the
    table's short name)."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        if mysql.classify(exc) is mysql.Kind.FULL:
            raise full_error(exc, f"writing rows of {target}", address(cur)) from exc
        raise


def address(conn: Any) -> str | None:
    """``host:port`` of a pymysql connection (or a cursor's), when it has them."""
    conn = getattr(conn, "connection", conn)
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    return f"{host}:{port}" if host and port else None


def retry_conflicts(conn: Connection[Any], transaction: Callable[[], None], what: str) -> None:
    """Run `transaction` (which ends with its commit), again from the start when the sink rolls
    it back for a deadlock or lock wait timeout: shards of parallel mode touch the same tables
    and the checkpoint table, so InnoDB may pick one of them as a deadlock victim."""
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            transaction()
            return
        except TransactionConflictError as exc:
            conn.rollback()
            if attempt == CONFLICT_ATTEMPTS:
                raise
            log.warning("%s: %s; running it again (attempt %d)", what, exc, attempt + 1)
