"""Parallel mode on the executors: each shard of a step is one sink transaction run as a Spark
task, holding its rows and its (job, batch, step, shard) commit marker.

The driver plans and collapses a step, splits it by key hash into shards (`changes.collapse`),
and ships each shard as a `ShardWrite`: plain values only (the envelopes the driver keeps for
error messages are replaced by one shared placeholder, so a shard pickles as tuples of values).
On the executor, `write_shard` renders the SQL literals, runs the statements and inserts the
shard's marker row into ``apply_checkpoint`` *first*, in the same transaction, then commits.

Exactly once: the marker's primary key is (job, batch, step, shard). Two attempts of one task
(a retry after a lost executor whose connection still lives, a speculative copy) serialize on
that key: the second finds it committed (duplicate key) and rolls back without writing; an
attempt that dies mid-transaction is rolled back by the server. The driver advances the job's
head only after every shard's marker is committed (`ShardedSteps.write`), and on a re-run
skips the shards whose marker exists. A shard that fails on an executor is run once more on
the driver, whose transaction names the event a failing statement stumbled on.

`ShardedSteps` is the driver's side of parallel mode: it runs a step's shards on the executors
(`remote`) or on threads of its own, one connection each, then ends the step
(`sinks.StepWrite.finish`: head and state, no checkpoint row of its own).
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.connections import Connection

from rowbus.protocol.events import Resolved
from rowbus.protocol.values import Value
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import TableChanges
from rowbus.spark_apply.exceptions import TransactionConflictError
from rowbus.spark_apply.ledger import Ledger
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.sink_conn import (
    CONFLICT_ATTEMPTS,
    connect_sink,
    db_errors,
    retry_conflicts,
)
from rowbus.spark_apply.sinks import StepWrite
from rowbus.spark_apply.snapshots import SeenSets
from rowbus.spark_apply.table_writes import write_table, write_tables

log = logging.getLogger(__name__)

SHIPPED = Envelope("", 0, -1, Resolved(source="", ts=0))
"""Stands in for a row's envelope in a shipped shard (only the driver names positions)."""

DUPLICATE_KEY = 1062


@dataclass(frozen=True, slots=True)
class ShardWrite:
    """One shard of one step: everything an executor needs, picklable."""

    sink: SinkConnection
    state_db: str
    """The quoted state database."""
    job: str
    shard: int
    checkpoint: tuple[Any, ...]
    """(batch id, step, offsets JSON, watermark, DDL statement or None)."""
    tables: tuple[TableChanges, ...]
    statement_bytes: int

    @property
    def rows(self) -> int:
        return sum(len(t) for t in self.tables)


def shipped(tc: TableChanges) -> TableChanges:
    """`tc` with every envelope replaced by `SHIPPED`."""
    return TableChanges(
        tc.target,
        tc.key_columns,
        upserts={k: (c, v, SHIPPED) for k, (c, v, _e) in tc.upserts.items()},
        deletes={k: (c, SHIPPED) for k, (c, _e) in tc.deletes.items()},
        clear={k: (c, SHIPPED) for k, (c, _e) in tc.clear.items()},
        ordered=[dataclasses.replace(ch, env=SHIPPED) for ch in tc.ordered],
    )


def write_shard(w: ShardWrite) -> int:
    """Run on an executor: the shard's transaction; rows written (0 when an earlier attempt
    already committed it)."""

    def body(cur: Any) -> int:
        for tc in w.tables:
            write_table(cur, tc, w.statement_bytes)
        return w.rows

    return marked_transaction(w.sink, w.state_db, w.job, w.shard, w.checkpoint, body, w.rows)


def marked_transaction(
    sink: SinkConnection,
    state_db: str,
    job: str,
    shard: int,
    checkpoint: tuple[Any, ...],
    body: Callable[[Any], int],
    rows: int | None = None,
) -> int:
    """One transaction on a connection of its own: the marker row (job, batch, step, shard)
    first, then `body` (which returns the rows it wrote), then the commit; 0 when an earlier
    attempt committed that marker. A deadlock or lock wait timeout (two tasks' writes on one
    table's gaps) rolls the whole transaction back, marker included, and it runs again. The
    marker's row count is `rows`, or what `body` wrote (set after it, in the transaction)."""
    batch_id, step, offsets, watermark, ddl = checkpoint
    conn = connect_sink(sink)
    try:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                with (
                    db_errors(f"batch {batch_id} step {step} task {shard}", sink.address),
                    conn.cursor() as cur,
                ):
                    try:
                        cur.execute(
                            f"INSERT INTO {state_db}.apply_checkpoint (job, batch_id, step, shard, "
                            "offsets, watermark, row_count, ddl, committed_at) "
                            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
                            (job, batch_id, step, shard, offsets, watermark, rows or 0, ddl),
                        )
                    except pymysql.err.IntegrityError as exc:
                        if exc.args and exc.args[0] == DUPLICATE_KEY:
                            conn.rollback()  # another attempt of this task committed it
                            return 0
                        raise
                    written = body(cur)
                    if rows is None:
                        cur.execute(
                            f"UPDATE {state_db}.apply_checkpoint SET row_count = %s WHERE "
                            "job = %s AND batch_id = %s AND step = %s AND shard = %s",
                            (written, job, batch_id, step, shard),
                        )
                    conn.commit()
                return written
            except TransactionConflictError:
                conn.rollback()
                if attempt == CONFLICT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")
    finally:
        conn.close()


class ShardedSteps:
    """Parallel mode on the driver: a step's shards, each in a transaction of its own with its
    marker, on the executors (`remote`) or on this process's threads; then the step's end.
    `start` takes the connections (one per shard, the ledger's first) and `close` stops the
    threads (the connections are the caller's)."""

    def __init__(self, parallelism: int) -> None:
        self._ledger: Ledger | None = None
        self.parallelism = parallelism
        self.remote: Callable[[list[ShardWrite]], object] | None = None
        """Runs shard transactions elsewhere (the apply job: as Spark tasks on the executors);
        None: on this process's threads."""
        self._conns: list[Connection[Any]] = []
        self._pool: ThreadPoolExecutor | None = None

    def start(self, ledger: Ledger, conns: list[Connection[Any]]) -> None:
        self._ledger = ledger
        self._conns = conns
        self._pool = ThreadPoolExecutor(self.parallelism, thread_name_prefix="sink")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._conns = []

    def shard_of(self, target: Target, skeleton: tuple[Value, ...]) -> int:
        """The shard that owns a key, by its skeleton (`keys.sink_key`, which collapse hands
        over): keys the sink's collation calls equal are one row, written by one shard."""
        return zlib.crc32(repr((target.schema, target.table, skeleton)).encode()) % self.parallelism

    def write(
        self,
        step: StepWrite,
        shards: dict[int, dict[Target, TableChanges]],
        statement_bytes: int,
        seen: SeenSets,
    ) -> None:
        """The shards not committed yet, then the step's end on the first connection."""
        assert self._ledger is not None
        assert self._pool is not None
        cp = step.checkpoint
        done = self._ledger.done_shards(cp[0], cp[1])
        if self.remote is not None:
            done = self._remote_shards(shards, cp, done, statement_bytes)
        futures = [
            self._pool.submit(
                self._shard_tx, self._conns[s], shards.get(s, {}), cp, s, statement_bytes
            )
            for s in range(self.parallelism)
            if s not in done
        ]
        for f in futures:
            f.result()
        conn = self._conns[0]
        if seen.running:
            # The shards' (maybe remote) writes add no seen keys: the step's keys go in with
            # the head, so a replay (shards done are skipped) adds them again (INSERT IGNORE).
            with db_errors("adding seen keys"), conn.cursor() as cur:
                for tables in shards.values():
                    for tc in tables.values():
                        rows = ((c, v) for c, v, _ in tc.upserts.values())
                        seen.add(cur, tc.target, rows, statement_bytes)
        step.finish(conn, None)

    def _remote_shards(
        self,
        shards: dict[int, dict[Target, TableChanges]],
        checkpoint: tuple[Any, ...],
        done: set[int],
        statement_bytes: int,
    ) -> set[int]:
        """Run the shards not in `done` through `remote`; the shards committed afterwards.
        A failure there is logged: the driver then runs what is left itself (and names the
        event a failing statement stumbled on)."""
        ledger = self._ledger
        assert self.remote is not None
        assert ledger is not None
        writes = [
            ShardWrite(
                ledger.settings,
                ledger.db,
                ledger.job,
                s,
                checkpoint,
                tuple(shipped(tc) for tc in shards.get(s, {}).values()),
                statement_bytes,
            )
            for s in range(self.parallelism)
            if s not in done
        ]
        if not writes:
            return done
        try:
            self.remote(writes)
        except Exception as exc:  # noqa: BLE001 - any task failure: the driver takes over
            log.warning(
                "batch %s step %s: shard writes on the executors failed (%s); the driver "
                "writes the shards not committed",
                checkpoint[0],
                checkpoint[1],
                str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
            )
        return ledger.done_shards(checkpoint[0], checkpoint[1])

    def _shard_tx(
        self,
        conn: Connection[Any],
        tables: dict[Target, TableChanges],
        checkpoint: Any,
        shard: int,
        statement_bytes: int,
    ) -> None:
        ledger = self._ledger
        assert ledger is not None

        def whole() -> None:
            write_tables(conn, tables, statement_bytes, None)
            ledger.checkpoint(conn, checkpoint, shard, sum(len(t) for t in tables.values()))
            ledger.commit(conn)

        retry_conflicts(conn, whole, f"batch {checkpoint[0]} step {checkpoint[1]} shard {shard}")
