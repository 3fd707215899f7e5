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
head only after every shard's marker is committed (`MySQLSink._apply_rows`), and on a re-run
skips the shards whose marker exists. A shard that fails on an executor is run once more on
the driver, whose transaction names the event a failing statement stumbled on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rowbus.protocol.events import Resolved
from rowbus.spark_apply.changes import TableChanges
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import SinkConnection

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
    from rowbus.spark_apply.sink import write_table

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
    import pymysql

    from rowbus.spark_apply.exceptions import TransactionConflictError
    from rowbus.spark_apply.sink import CONFLICT_ATTEMPTS, connect_sink, db_errors

    batch_id, step, offsets, watermark, ddl = checkpoint
    conn = connect_sink(sink)
    try:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                with db_errors(f"batch {batch_id} step {step} task {shard}"), conn.cursor() as cur:
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
