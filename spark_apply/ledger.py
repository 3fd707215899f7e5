"""The job's bookkeeping in the sink's state database, which every kind of sink shares.

`Ledger` owns the state database's connection and its tables (in `state_database`):

- ``apply_head``: one row per job: last batch id, step, phase, whether the batch is complete.
  Every move of it has a precondition (`advance`: ``UPDATE … WHERE`` the head read before), so
  a batch is applied on top of the batch before it or not at all.
- ``apply_checkpoint``: one row per (job, batch, step, shard) committed, with the Kafka offsets
  and the watermark; its primary key makes a second application of the same part fail.
- ``apply_state_header``, ``apply_stash`` and ``apply_stash_pieces``: the planner state
  (watermarks + the stash's index) after each complete batch and the held events themselves,
  in pieces of bounded size (`rowbus.spark_apply.state_store`, `rowbus.spark_apply.sink_spill`);
  ``apply_state`` (one value per batch) is only read, for a sink written by an older version.
- ``apply_gate``: the DDL gate answers a batch was planned with, stored before any part of it
  commits, so a replay of a partly applied batch plans the same steps (`stored_gates`).
- ``apply_tasks``: the write-task count of a throughput-mode batch, stored before any task
  writes (`batch_tasks`).

A step's checkpoint row, the head's move and the state are written by `checkpoint`, `advance`
and `save_state` on a connection the caller's transaction is open on (the MySQL sink's rows
share it; `sinks.Sink` says when). The ledger knows nothing of rows or of how a kind of sink
writes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.connections import Connection

from rowbus.clients.mysql import quote
from rowbus.spark_apply.exceptions import ApplyError, CheckpointConflictError
from rowbus.spark_apply.planner import Plan, PlannerState
from rowbus.spark_apply.rendered import Wire
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.sink_conn import connect_sink, db_errors
from rowbus.spark_apply.sink_spill import PieceSpill
from rowbus.spark_apply.snapshots import SeenSets
from rowbus.spark_apply.state_store import StateStore, piece_size

log = logging.getLogger(__name__)

Checkpoint = tuple[int, int, str, int, str | None]
"""A step's checkpoint row: (batch id, step, offsets JSON, watermark, DDL statement or None)."""


@dataclass(frozen=True, slots=True)
class Head:
    batch_id: int
    step: int
    phase: str  # "rows" (DDL of the step pending) or "done"
    complete: bool


def offsets_json(state: PlannerState) -> str:
    """The state's next offset per partition, as a checkpoint row stores them."""
    return json.dumps(sorted([*k, v] for k, v in state.offsets.items()))


class Ledger:
    """Head, checkpoints, state, gates and task counts of one job in the state database; see
    the module docstring. The constructor does no I/O; `start()` connects and creates the
    tables."""

    def __init__(self, conn: SinkConnection, job: str, state_database: str) -> None:
        self.settings = conn
        self.job = job
        self.db = quote(state_database)
        """The quoted state database."""
        self._conn: Connection[Any] | None = None
        self.lock = threading.RLock()
        """Held by whoever uses `conn` while a pipelined write of the MySQL sink may run on it
        (its `_Pipeline`, the spill's reads of older segments)."""
        self.state_store = StateStore(self.db, job)
        self._saved: tuple[int, PlannerState] | None = None
        """(batch id, state) of the state last written (valid once its transaction commits)."""
        self.packet = 0
        """The server's max_allowed_packet (known after `start`)."""
        self.at = conn.address
        """The sink's address, for the errors that name it."""

    @property
    def conn(self) -> Connection[Any]:
        """The state database's connection (no autocommit)."""
        if self._conn is None:
            raise ApplyError(f"job {self.job}: the sink is not started")
        return self._conn

    def start(self, seen: SeenSets) -> None:
        """Connect, create the state tables and load the running snapshots' seen sets."""
        self._conn = conn = connect_sink(self.settings)
        db = self.db
        with db_errors("creating the apply state tables", self.at), conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.apply_head (job VARCHAR(128) PRIMARY KEY, "
                "batch_id BIGINT NOT NULL, step INT NOT NULL, phase VARCHAR(8) NOT NULL, "
                "complete BOOL NOT NULL) ENGINE=InnoDB"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.apply_checkpoint (job VARCHAR(128) NOT NULL, "
                "batch_id BIGINT NOT NULL, step INT NOT NULL, shard INT NOT NULL, "
                "offsets LONGTEXT NOT NULL, watermark BIGINT NOT NULL, row_count INT NOT NULL, "
                "ddl LONGTEXT NULL, committed_at DATETIME(6) NOT NULL, "
                "PRIMARY KEY (job, batch_id, step, shard)) ENGINE=InnoDB"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.apply_state (job VARCHAR(128) NOT NULL, "
                "batch_id BIGINT NOT NULL, state LONGBLOB NOT NULL, "
                "PRIMARY KEY (job, batch_id)) ENGINE=InnoDB"
            )
            self.state_store.create(cur)
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.apply_gate (job VARCHAR(128) NOT NULL, "
                "batch_id BIGINT NOT NULL, answers LONGTEXT NOT NULL, "
                "PRIMARY KEY (job, batch_id)) ENGINE=InnoDB"
            )
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.apply_tasks (job VARCHAR(128) NOT NULL, "
                "batch_id BIGINT NOT NULL, tasks INT NOT NULL, "
                "PRIMARY KEY (job, batch_id)) ENGINE=InnoDB"
            )
            cur.execute("SELECT @@max_allowed_packet")
            (packet,) = cur.fetchone()
            self.packet = int(packet)
            self.state_store.piece_bytes = piece_size(self.packet)
            seen.load(cur)
        conn.commit()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    # -- reading ---------------------------------------------------------------------------

    def _one(self, what: str, sql: str, args: tuple[Any, ...]) -> Any:
        """The first row of `sql` on `conn`, in a transaction of its own (None: no row)."""
        conn = self.conn
        with db_errors(what, self.at), conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone()
        conn.commit()
        return row

    def head(self) -> Head | None:
        row = self._one(
            "reading the apply head",
            f"SELECT batch_id, step, phase, complete FROM {self.db}.apply_head WHERE job = %s",
            (self.job,),
        )
        return None if row is None else Head(int(row[0]), int(row[1]), row[2], bool(row[3]))

    def head_text(self) -> str:
        head = self.head()
        if head is None:
            return "none"
        return f"{head.batch_id} step {head.step}{'' if head.complete else ' (partial)'}"

    def load_state(self, batch_id: int) -> PlannerState:
        """The state stored with batch `batch_id` (empty when there is none)."""
        saved, self._saved = self._saved, None
        if saved is not None and saved[0] == batch_id:
            # Written by this sink in the batch just committed (the head says so): the state
            # need not be read back.
            return saved[1]
        conn = self.conn
        with db_errors("reading the apply state", self.at), conn.cursor() as cur:
            state = self.state_store.load(cur, batch_id)
            if state is None:  # a sink written by an older version: one value per batch
                cur.execute(
                    f"SELECT state FROM {self.db}.apply_state WHERE job = %s AND batch_id = %s",
                    (self.job, batch_id),
                )
                row = cur.fetchone()
                state = PlannerState() if row is None else PlannerState.from_bytes(bytes(row[0]))
        conn.commit()
        return state

    def stored_gates(self, batch_id: int) -> tuple[tuple[str, bool], ...] | None:
        """The DDL gate answers batch `batch_id` was first planned with, if it stored them
        (it does before committing any part of itself); None: plan with the live ones."""
        row = self._one(
            "reading the gate answers",
            f"SELECT answers FROM {self.db}.apply_gate WHERE job = %s AND batch_id = %s",
            (self.job, batch_id),
        )
        if row is None:
            return None
        return tuple((str(k), bool(v)) for k, v in json.loads(row[0]))

    def store_gates(self, batch_id: int, plan: Plan) -> None:
        # Its own transaction, before any part of the batch commits: a replay of a batch with
        # parts committed must plan the same steps, so it must see the same gate answers
        # (shard-DDL locks move on their own). Kept for the batch before too, then dropped.
        conn = self.conn
        with db_errors("storing the gate answers", self.at), conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {self.db}.apply_gate WHERE job = %s AND batch_id < %s",
                (self.job, batch_id - 1),
            )
            if plan.gates:
                cur.execute(
                    f"INSERT IGNORE INTO {self.db}.apply_gate (job, batch_id, answers) "
                    "VALUES (%s, %s, %s)",
                    (self.job, batch_id, json.dumps([list(g) for g in plan.gates])),
                )
        self.commit(conn)

    def spill_for(self, batch_id: int, wire: Wire | None = None) -> PieceSpill:
        """The spill store to plan batch `batch_id` with (`planner.plan(spill=…)`): chunks of
        earlier batches are read from this sink's pieces; the caller closes it. `wire`: the
        record bytes of the batch's rendered rows (`rendered.Wire`)."""
        cur = self.conn.cursor()

        def fetch(segment: int, pos: int) -> tuple[int, bytes] | None:
            # A step's rows are read while the chunk before is being written on the same
            # connection (the MySQL sink's `_Pipeline`): one at a time.
            with self.lock, db_errors("reading stashed events", self.at):
                return self.state_store.fetcher(cur)(segment, pos)

        return PieceSpill(batch_id, fetch, wire)

    def committed_offsets(self, batch_id: int) -> dict[tuple[str, int], int] | None:
        """The next offset per partition the sink committed for `batch_id` (None: no row)."""
        row = self._one(
            "reading a checkpoint",
            f"SELECT offsets FROM {self.db}.apply_checkpoint WHERE job = %s AND "
            "batch_id = %s ORDER BY step DESC LIMIT 1",
            (self.job, batch_id),
        )
        if row is None:
            return None
        return {(t, int(p)): int(o) for t, p, o in json.loads(row[0])}

    def committed_batches(self) -> list[tuple[int, int, int]]:
        """(batch id, step, shard) of every checkpoint row of this job, in order."""
        conn = self.conn
        with db_errors("listing checkpoints", self.at), conn.cursor() as cur:
            cur.execute(
                f"SELECT batch_id, step, shard FROM {self.db}.apply_checkpoint WHERE job = %s "
                "ORDER BY batch_id, step, shard",
                (self.job,),
            )
            rows = cur.fetchall()
        conn.commit()
        return [(int(a), int(b), int(c)) for a, b, c in rows]

    def done_shards(self, batch_id: int, step: int) -> set[int]:
        conn = self.conn
        with db_errors("reading shard checkpoints", self.at), conn.cursor() as cur:
            cur.execute(
                f"SELECT shard FROM {self.db}.apply_checkpoint "
                "WHERE job = %s AND batch_id = %s AND step = %s",
                (self.job, batch_id, step),
            )
            rows = cur.fetchall()
        conn.commit()
        return {int(r[0]) for r in rows}

    # -- throughput mode's task counts -------------------------------------------------------

    def stored_tasks(self, batch_id: int) -> int | None:
        """The write-task count an earlier attempt of throughput batch `batch_id` stored
        (`batch_tasks`): the batch is in flight, some of its tasks may have committed; None:
        no attempt got that far."""
        row = self._one(
            "reading the batch's task count",
            f"SELECT tasks FROM {self.db}.apply_tasks WHERE job = %s AND batch_id = %s",
            (self.job, batch_id),
        )
        return None if row is None else int(row[0])

    def batch_tasks(self, batch_id: int, tasks: int) -> int:
        """The write tasks of throughput batch `batch_id`: `tasks` unless an earlier attempt
        stored its own, which a replay keeps (a marker names a task of that count: with
        another count the same keys would land in other tasks, and a committed marker would
        skip rows it does not hold). Stored in its own transaction before any task writes."""
        conn = self.conn
        with db_errors("storing the batch's task count", self.at), conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {self.db}.apply_tasks WHERE job = %s AND batch_id < %s",
                (self.job, batch_id - 1),
            )
            cur.execute(
                f"INSERT IGNORE INTO {self.db}.apply_tasks (job, batch_id, tasks) "
                "VALUES (%s, %s, %s)",
                (self.job, batch_id, tasks),
            )
            cur.execute(
                f"SELECT tasks FROM {self.db}.apply_tasks WHERE job = %s AND batch_id = %s",
                (self.job, batch_id),
            )
            (stored,) = cur.fetchone()
        conn.commit()
        if int(stored) != tasks:
            log.warning(
                "batch %d: resumed with the %d write tasks its first attempt stored "
                "(apply.parallelism %d takes effect from the next batch)",
                batch_id,
                stored,
                tasks,
            )
        return int(stored)

    # -- writing, in the caller's transaction ------------------------------------------------

    def commit(self, conn: Connection[Any]) -> None:
        with db_errors("committing a batch", self.at):
            conn.commit()

    def checkpoint(self, conn: Connection[Any], cp: Checkpoint, shard: int, rows: int) -> None:
        """The checkpoint row of (batch, step, shard), in `conn`'s open transaction."""
        batch_id, step, offsets, watermark, ddl = cp
        with db_errors("writing the checkpoint", self.at), conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.db}.apply_checkpoint (job, batch_id, step, shard, offsets, "
                "watermark, row_count, ddl, committed_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
                (self.job, batch_id, step, shard, offsets, watermark, rows, ddl),
            )

    def advance(self, conn: Connection[Any], old: Head | None, new: Head) -> Head:
        """Move the head from `old` to `new`; CheckpointConflictError if it is not `old`."""
        with db_errors("advancing the apply head", self.at), conn.cursor() as cur:
            if old is None:
                try:
                    cur.execute(
                        f"INSERT INTO {self.db}.apply_head (job, batch_id, step, phase, "
                        "complete) VALUES (%s, %s, %s, %s, %s)",
                        (self.job, new.batch_id, new.step, new.phase, new.complete),
                    )
                except pymysql.err.IntegrityError:
                    conn.rollback()
                    raise CheckpointConflictError(
                        f"job {self.job}: another driver wrote the first checkpoint"
                    ) from None
                return new
            n = cur.execute(
                f"UPDATE {self.db}.apply_head SET batch_id = %s, step = %s, phase = %s, "
                "complete = %s WHERE job = %s AND batch_id = %s AND step = %s AND phase = %s "
                "AND complete = %s",
                (
                    new.batch_id,
                    new.step,
                    new.phase,
                    new.complete,
                    self.job,
                    old.batch_id,
                    old.step,
                    old.phase,
                    old.complete,
                ),
            )
        if n != 1:
            conn.rollback()
            raise CheckpointConflictError(
                f"job {self.job}: the sink's head moved away from {old} (another driver?)"
            )
        return new

    def save_state(self, conn: Connection[Any], batch_id: int, plan: Plan) -> None:
        """The state after batch `batch_id` (complete), in `conn`'s open transaction."""
        spill = plan.spill if isinstance(plan.spill, PieceSpill) else None
        with db_errors("writing the apply state", self.at), conn.cursor() as cur:
            self.state_store.save(cur, batch_id, plan.state, spill)
            self._saved = (batch_id, plan.state)
            # The batch is complete: a replay is a skip, its gate answers are not needed.
            cur.execute(
                f"DELETE FROM {self.db}.apply_gate WHERE job = %s AND batch_id <= %s",
                (self.job, batch_id),
            )
            cur.execute(
                f"DELETE FROM {self.db}.apply_state WHERE job = %s AND batch_id < %s",
                (self.job, batch_id),
            )
