"""The MySQL/MariaDB sink: a batch's rows, its checkpoint and its stash in one transaction.

Lifecycle: ``MySQLSink(...)`` does no I/O; `start()` connects and creates the state tables;
`previous_state(batch_id)` says what the batch builds on (None: already committed, skip it);
`apply(batch_id, plan)` commits it; `close()` disconnects.

Guarantee: exactly once. Every transaction advances the job's *head* row with a precondition
(``UPDATE … WHERE`` the head it read), so a batch is applied on top of the batch before it or not
at all; a replayed batch that is committed is skipped, one that is half-way (a DDL step, or some
shards in parallel mode) resumes after its last committed part. State tables, in `state_database`:

- ``apply_head``: one row per job: last batch id, step, phase, whether the batch is complete.
- ``apply_checkpoint``: one row per (job, batch, step, shard) committed, with the Kafka offsets
  and the watermark; its primary key makes a second application of the same part fail.
- ``apply_state_header``, ``apply_stash`` and ``apply_stash_pieces``: the planner state
  (watermarks + the stash's index) after each complete batch and the held events themselves,
  in pieces of bounded size (`rowbus.spark_apply.state_store`, `rowbus.spark_apply.pieces`);
  ``apply_state`` (one value per batch) is only read, for a sink written by an older version.
- ``apply_gate``: the DDL gate answers a batch was planned with, stored before any part of it
  commits, so a replay of a partly applied batch plans the same steps (`stored_gates`).

Checkpoint safety: Spark's checkpoint folder names the batch ids and offsets; the sink's
checkpoints name what is committed. `check_offsets` compares the two before a batch is
applied or skipped, so a lost, reset or foreign Spark checkpoint stops the job with one line
naming both positions instead of skipping batches the sink never saw.

Modes: snapshot — one step of a batch is one transaction (a batch without DDL is one
transaction), so readers only see upstream-consistent states; parallel — each step's rows are
split by key hash into shards, each committed in its own transaction on its own connection.
DDL of a table that is not sharded is executed at its barrier, between the rows before it and
those after it (MySQL commits DDL implicitly, so a DDL step is a phase of its own), exactly once
by a marker written around it (`rowbus.spark_apply.ddl`, which also says what is not applied).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any

import pymysql
from pymysql.connections import Connection

from rowbus.clients import mysql
from rowbus.clients.mysql import quote
from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd
from rowbus.protocol.values import Value
from rowbus.routing.routes import Router, Target
from rowbus.spark_apply import lenient
from rowbus.spark_apply.changes import (
    STATEMENT_BYTES,
    SchemaLookup,
    TableChanges,
    collapse,
    delete_statements,
    keyless_statements,
)
from rowbus.spark_apply.ddl import SinkDdl
from rowbus.spark_apply.exceptions import (
    ApplyError,
    BadEventError,
    CheckpointConflictError,
    SinkUnavailableError,
    TransactionConflictError,
)
from rowbus.spark_apply.keys import Fold, fold_of
from rowbus.spark_apply.pieces import PieceSpill
from rowbus.spark_apply.planner import Envelope, Plan, PlannerState, Step
from rowbus.spark_apply.rendered import Wire
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.shard_writes import ShardWrite, shipped
from rowbus.spark_apply.snapshots import SeenSets
from rowbus.spark_apply.state_store import StateStore, piece_size

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 5
CHUNK_ROWS = 20_000
"""Rows of a step collapsed and written at a time (snapshot mode): a released 1M-row
transaction is read, collapsed and rendered a chunk at a time, never whole."""


@dataclass(frozen=True, slots=True)
class Head:
    batch_id: int
    step: int
    phase: str  # "rows" (DDL of the step pending) or "done"
    complete: bool


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
def db_errors(what: str) -> Iterator[None]:
    """Translate pymysql errors (the one choke point), keeping their codes."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        raise _apply_error(exc, what) from exc


def _apply_error(exc: BaseException, what: str) -> ApplyError:
    """The apply job's error for a sink failure, by the MySQL seam's classification."""
    kind = mysql.classify(exc)
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


class MySQLSink:
    """Applies plans to one MySQL/MariaDB server; see the module docstring."""

    def __init__(
        self,
        conn: SinkConnection,
        job: str,
        state_database: str,
        router: Router,
        schemas: SchemaLookup,
        mode: str = "snapshot",
        parallelism: int = 1,
    ) -> None:
        self._conn_settings = conn
        self.job = job
        self._db = quote(state_database)
        self._router = router
        self._schemas = schemas
        self._mode = mode
        self._parallelism = parallelism if mode == "parallel" else 1
        self._conns: list[Connection[Any]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._catalog_conn: Connection[Any] | None = None
        self._conn_lock = threading.RLock()
        """Held by whoever uses the first connection while a pipelined write may run on it
        (`_Pipeline`, the spill's reads of older segments)."""
        self._ddl = SinkDdl(router, self._ddl_connection, state_database, job)
        self.seen = SeenSets(router)
        """The snapshots running in the sink (PROTOCOL.md §9.7, `rowbus.spark_apply.snapshots`)."""
        self.state_store = StateStore(self._db, job)
        self._saved: tuple[int, PlannerState] | None = None
        """(batch id, state) of the state last written (valid once its transaction commits)."""
        self._statement_bytes = STATEMENT_BYTES
        """The longest statement rendered: below the server's max_allowed_packet (`start`)."""
        self.chunk_rows = CHUNK_ROWS
        """Snapshot mode: rows collapsed and written at a time within a step's transaction."""
        self._unique: dict[Target, tuple[tuple[str, ...], ...]] = {}
        self._generated_columns: dict[Target, frozenset[str]] = {}
        self._column_folds: dict[Target, dict[str, Fold]] = {}
        self.remote: Callable[[list[ShardWrite]], object] | None = None
        """Parallel mode: runs shard transactions elsewhere (the apply job: as Spark tasks on
        the executors, `rowbus.spark_apply.shard_writes`); None: on this process's threads."""

    # -- lifecycle -------------------------------------------------------------------------

    def _connect(self) -> Connection[Any]:
        return connect_sink(self._conn_settings)

    def start(self) -> MySQLSink:
        self._conns = [self._connect() for _ in range(self._parallelism)]
        if self._parallelism > 1:
            self._pool = ThreadPoolExecutor(self._parallelism, thread_name_prefix="sink")
        else:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="sink-writer")
        db = self._db
        with db_errors("creating the apply state tables"), self._conns[0].cursor() as cur:
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
            self.state_store.piece_bytes = piece_size(int(packet))
            # Rows too: no statement may approach the server's packet limit.
            self._statement_bytes = min(STATEMENT_BYTES, int(packet) // 4)
            self.seen.load(cur)
        self._conns[0].commit()
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None
        for conn in [*self._conns, *([self._catalog_conn] if self._catalog_conn else [])]:
            with contextlib.suppress(Exception):
                conn.close()
        self._conns = []
        self._catalog_conn = None

    def __enter__(self) -> MySQLSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checkpoints -----------------------------------------------------------------------

    def head(self) -> Head | None:
        conn = self._conns[0]
        with db_errors("reading the apply head"), conn.cursor() as cur:
            cur.execute(
                f"SELECT batch_id, step, phase, complete FROM {self._db}.apply_head WHERE job = %s",
                (self.job,),
            )
            row = cur.fetchone()
        conn.commit()
        return None if row is None else Head(int(row[0]), int(row[1]), row[2], bool(row[3]))

    def previous_state(self, batch_id: int) -> PlannerState | None:
        """The state `batch_id` builds on; None if the batch is already committed."""
        head = self.head()
        if head is None:
            if batch_id > 0:
                log.warning(
                    "job %s: no checkpoint in the sink; batch %d starts fresh", self.job, batch_id
                )
            return PlannerState()
        if head.batch_id > batch_id or (head.batch_id == batch_id and head.complete):
            return None
        if not (head.batch_id == batch_id or (head.batch_id == batch_id - 1 and head.complete)):
            raise CheckpointConflictError(
                f"job {self.job}: batch {batch_id} cannot build on the sink's head "
                f"(batch {head.batch_id} step {head.step}, complete={head.complete}); is the "
                "Spark checkpoint folder the one of this sink?"
            )
        return self._load_state(batch_id - 1)

    def _load_state(self, batch_id: int) -> PlannerState:
        saved, self._saved = self._saved, None
        if saved is not None and saved[0] == batch_id:
            # Written by this sink in the batch just committed (the head says so): the state
            # need not be read back.
            return saved[1]
        conn = self._conns[0]
        with db_errors("reading the apply state"), conn.cursor() as cur:
            state = self.state_store.load(cur, batch_id)
            if state is None:  # a sink written by an older version: one value per batch
                cur.execute(
                    f"SELECT state FROM {self._db}.apply_state WHERE job = %s AND batch_id = %s",
                    (self.job, batch_id),
                )
                row = cur.fetchone()
                state = PlannerState() if row is None else PlannerState.from_bytes(bytes(row[0]))
        conn.commit()
        return state

    def stored_gates(self, batch_id: int) -> tuple[tuple[str, bool], ...] | None:
        """The DDL gate answers batch `batch_id` was first planned with, if it stored them
        (it does before committing any part of itself); None: plan with the live ones."""
        conn = self._conns[0]
        with db_errors("reading the gate answers"), conn.cursor() as cur:
            cur.execute(
                f"SELECT answers FROM {self._db}.apply_gate WHERE job = %s AND batch_id = %s",
                (self.job, batch_id),
            )
            row = cur.fetchone()
        conn.commit()
        if row is None:
            return None
        return tuple((str(k), bool(v)) for k, v in json.loads(row[0]))

    def _store_gates(self, batch_id: int, plan: Plan) -> None:
        # Its own transaction, before any part of the batch commits: a replay of a batch with
        # parts committed must plan the same steps, so it must see the same gate answers
        # (shard-DDL locks move on their own). Kept for the batch before too, then dropped.
        conn = self._conns[0]
        with db_errors("storing the gate answers"), conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {self._db}.apply_gate WHERE job = %s AND batch_id < %s",
                (self.job, batch_id - 1),
            )
            if plan.gates:
                cur.execute(
                    f"INSERT IGNORE INTO {self._db}.apply_gate (job, batch_id, answers) "
                    "VALUES (%s, %s, %s)",
                    (self.job, batch_id, json.dumps([list(g) for g in plan.gates])),
                )
        self._commit(conn)

    def spill_for(self, batch_id: int, wire: Wire | None = None) -> PieceSpill:
        """The spill store to plan batch `batch_id` with (`planner.plan(spill=…)`): chunks of
        earlier batches are read from this sink's pieces; the caller closes it. `wire`: the
        record bytes of the batch's rendered rows (`rendered.Wire`)."""
        cur = self._conns[0].cursor()

        def fetch(segment: int, pos: int) -> tuple[int, bytes] | None:
            # A step's rows are read while the chunk before is being written on the same
            # connection (`_Pipeline`): one at a time.
            with self._conn_lock, db_errors("reading stashed events"):
                return self.state_store.fetcher(cur)(segment, pos)

        return PieceSpill(batch_id, fetch, wire)

    def committed_offsets(self, batch_id: int) -> dict[tuple[str, int], int] | None:
        """The next offset per partition the sink committed for `batch_id` (None: no row)."""
        conn = self._conns[0]
        with db_errors("reading a checkpoint"), conn.cursor() as cur:
            cur.execute(
                f"SELECT offsets FROM {self._db}.apply_checkpoint WHERE job = %s AND "
                "batch_id = %s ORDER BY step DESC LIMIT 1",
                (self.job, batch_id),
            )
            row = cur.fetchone()
        conn.commit()
        if row is None:
            return None
        return {(t, int(p)): int(o) for t, p, o in json.loads(row[0])}

    def check_offsets(
        self,
        batch_id: int,
        ranges: dict[tuple[str, int], tuple[int, int]],
        previous: PlannerState | None,
    ) -> None:
        """Refuse a batch whose offsets (first, last per partition, as Spark proposes them)
        do not fit the sink: a batch the sink committed must be the same records (a replay),
        and a new one must start after what the sink holds. CheckpointConflictError names
        both positions."""
        if not ranges:
            return
        if previous is None:  # committed: Spark replays a batch the sink has
            stored = self.committed_offsets(batch_id)
            if stored is None:
                return  # no checkpoint row of that batch (state cleared by hand): no claim
            for (topic, part), (_first, last) in sorted(ranges.items()):
                if stored.get((topic, part)) != last + 1:
                    raise CheckpointConflictError(
                        f"job {self.job}: Spark proposes batch {batch_id} as "
                        f"{topic}[{part}]@{_first}..{last}, but the sink committed batch "
                        f"{batch_id} up to {topic}[{part}]@{stored.get((topic, part), 0)} "
                        f"(sink head: batch {self._head_text()}); the Spark checkpoint folder "
                        "is lost, reset or another job's: restore it (or clear the sink's "
                        "state to apply everything again) instead of skipping batches"
                    )
            return
        for (topic, part), (first, _last) in sorted(ranges.items()):
            held = previous.offsets.get((topic, part), 0)
            if first < held:
                raise CheckpointConflictError(
                    f"job {self.job}: Spark proposes batch {batch_id} from {topic}[{part}]@"
                    f"{first}, but the sink already applied up to {topic}[{part}]@{held} "
                    f"(sink head: batch {self._head_text()}): either the Spark checkpoint "
                    "folder is not the one of this sink (restore it), or the topic lost records "
                    "or was recreated so its offsets start over (a broker that came back without "
                    "its data): then apply everything again under a new apply.job, or with the "
                    "sink's state cleared, once the readers published again"
                )

    def _head_text(self) -> str:
        head = self.head()
        if head is None:
            return "none"
        return f"{head.batch_id} step {head.step}{'' if head.complete else ' (partial)'}"

    def committed_batches(self) -> list[tuple[int, int, int]]:
        """(batch id, step, shard) of every checkpoint row of this job, in order."""
        conn = self._conns[0]
        with db_errors("listing checkpoints"), conn.cursor() as cur:
            cur.execute(
                f"SELECT batch_id, step, shard FROM {self._db}.apply_checkpoint WHERE job = %s "
                "ORDER BY batch_id, step, shard",
                (self.job,),
            )
            rows = cur.fetchall()
        conn.commit()
        return [(int(a), int(b), int(c)) for a, b, c in rows]

    # -- throughput mode (`rowbus.spark_apply.throughput`) ------------------------------------

    def stored_tasks(self, batch_id: int) -> int | None:
        """The write-task count an earlier attempt of throughput batch `batch_id` stored
        (`batch_tasks`): the batch is in flight, some of its tasks may have committed; None:
        no attempt got that far."""
        conn = self._conns[0]
        with db_errors("reading the batch's task count"), conn.cursor() as cur:
            cur.execute(
                f"SELECT tasks FROM {self._db}.apply_tasks WHERE job = %s AND batch_id = %s",
                (self.job, batch_id),
            )
            row = cur.fetchone()
        conn.commit()
        return None if row is None else int(row[0])

    def batch_tasks(self, batch_id: int, tasks: int) -> int:
        """The write tasks of throughput batch `batch_id`: `tasks` unless an earlier attempt
        stored its own, which a replay keeps (a marker names a task of that count: with
        another count the same keys would land in other tasks, and a committed marker would
        skip rows it does not hold). Stored in its own transaction before any task writes."""
        conn = self._conns[0]
        with db_errors("storing the batch's task count"), conn.cursor() as cur:
            cur.execute(
                f"DELETE FROM {self._db}.apply_tasks WHERE job = %s AND batch_id < %s",
                (self.job, batch_id - 1),
            )
            cur.execute(
                f"INSERT IGNORE INTO {self._db}.apply_tasks (job, batch_id, tasks) "
                "VALUES (%s, %s, %s)",
                (self.job, batch_id, tasks),
            )
            cur.execute(
                f"SELECT tasks FROM {self._db}.apply_tasks WHERE job = %s AND batch_id = %s",
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

    def commit_owned(self, batch_id: int, state: PlannerState, rows: int) -> None:
        """Throughput batch `batch_id` is whole in the sink (every task's marker committed):
        its head, its closing marker (shard -1) and its state, in one transaction whose
        precondition is the head of the batch before."""
        head = self.head()
        if head is not None and (
            head.batch_id > batch_id or (head.batch_id == batch_id and head.complete)
        ):
            return
        conn = self._conns[0]
        offsets = json.dumps(sorted([*k, v] for k, v in state.offsets.items()))
        self._checkpoint(conn, (batch_id, 0, offsets, state.released_through, None), -1, rows)
        self._advance(conn, head, Head(batch_id, 0, "done", True))
        self._save_state(conn, batch_id, Plan((), state, state.released_through))
        self._commit(conn)

    def target_keys(self, target: Target) -> tuple[tuple[tuple[str, ...], ...], frozenset[str]]:
        """The target's unique keys and generated columns (cached until the next DDL)."""
        return self._unique_keys(target), self._generated(target)

    def target_folds(self, target: Target) -> dict[str, Fold] | None:
        """How the sink compares each column of the target (`_folds`, cached until the next
        DDL), or None when the sink has no such table yet (not cached: it may appear)."""
        found = self._folds(target)
        if not found:
            self._column_folds.pop(target, None)
            return None
        return found

    @property
    def statement_bytes(self) -> int:
        return self._statement_bytes

    @property
    def settings(self) -> SinkConnection:
        return self._conn_settings

    @property
    def state_db(self) -> str:
        """The quoted state database."""
        return self._db

    # -- applying --------------------------------------------------------------------------

    def apply(self, batch_id: int, plan: Plan) -> int:
        """Commit `plan` as batch `batch_id` (resuming a half-applied one); rows applied."""
        head = self.head()
        if head is not None and (
            head.batch_id > batch_id or (head.batch_id == batch_id and head.complete)
        ):
            log.info("job %s: batch %d is already committed; skipped", self.job, batch_id)
            return 0
        start_step, ddl_only = 0, False
        if plan.gates:
            self._store_gates(batch_id, plan)
        if head is not None and head.batch_id == batch_id:
            start_step = head.step + (1 if head.phase == "done" else 0)
            ddl_only = head.phase == "rows"
        applied = 0
        last = len(plan.steps) - 1
        for index in range(start_step, len(plan.steps)):
            step = plan.steps[index]
            if not (ddl_only and index == start_step):
                applied += self._apply_rows(batch_id, index, index == last, step, plan, head)
                head = self.head()
            if step.ddl is not None and isinstance(step.ddl.event, SnapshotBegin | SnapshotEnd):
                head = self._apply_marker(
                    step.ddl.event, head, Head(batch_id, index, "done", False)
                )
            elif step.ddl is not None:
                # A DDL may add or drop unique keys and generated columns.
                self._unique.clear()
                self._generated_columns.clear()
                self._column_folds.clear()
                self._apply_ddl(step.ddl)
                head = self._advance(self._conns[0], head, Head(batch_id, index, "done", False))
                self._conns[0].commit()
        return applied

    def _apply_rows(
        self, batch_id: int, index: int, final: bool, step: Step, plan: Plan, head: Head | None
    ) -> int:
        shard_of = self._shard_of if self._parallelism > 1 else _zero
        new_head = Head(batch_id, index, "done" if step.ddl is None else "rows", final)
        ddl = (
            step.ddl.event.statement if step.ddl and isinstance(step.ddl.event, DdlChange) else None
        )
        checkpoint = (
            batch_id,
            index,
            json.dumps(sorted([*k, v] for k, v in plan.state.offsets.items())),
            plan.bound,
            ddl,
        )
        if self._parallelism == 1:
            conn = self._conns[0]

            def whole() -> None:
                # The step's rows in chunks, each collapsed and written before the next is
                # read (a chunk's writes are those of a step of its own: applying contiguous
                # parts in order passes through the same states), all in this transaction.
                # Each chunk is written on the writer thread while this one collapses the
                # next: the server executes a chunk's statements while Python prepares the
                # next one (the GIL is free while the writer waits on the socket).
                written = 0
                with _Pipeline(self._writer, self._conn_lock) as pipe:
                    for part in _chunks(step.rows, self.chunk_rows):
                        shards = collapse(
                            part,
                            self._router,
                            self._schemas,
                            _zero,
                            self._unique_keys,
                            self._generated,
                            self._folds,
                        )
                        tables = shards.get(0, {})
                        pipe.submit(self._write, conn, tables, step)
                        written += sum(len(t) for t in tables.values())
                self._checkpoint(conn, checkpoint, 0, written)
                self._advance(conn, head, new_head)
                if final:
                    self._save_state(conn, batch_id, plan)
                self._commit(conn)

            _retry_conflicts(conn, whole, f"batch {batch_id} step {index}")
            return len(step.rows)
        shards = collapse(
            step.rows,
            self._router,
            self._schemas,
            shard_of,
            self._unique_keys,
            self._generated,
            self._folds,
        )
        done = self._done_shards(batch_id, index)
        if self.remote is not None:
            done = self._remote_shards(shards, step, checkpoint, done)
        assert self._pool is not None
        futures = [
            self._pool.submit(
                self._shard_tx, self._conns[s], shards.get(s, {}), step, checkpoint, s
            )
            for s in range(self._parallelism)
            if s not in done
        ]
        for f in futures:
            f.result()
        conn = self._conns[0]
        if self.seen.running:
            # The shards' (maybe remote) writes add no seen keys: the step's keys go in with
            # the head, so a replay (shards done are skipped) adds them again (INSERT IGNORE).
            with db_errors("adding seen keys"), conn.cursor() as cur:
                for tables in shards.values():
                    for tc in tables.values():
                        rows = ((c, v) for c, v, _ in tc.upserts.values())
                        self.seen.add(cur, tc.target, rows, self._statement_bytes)
        self._advance(conn, head, new_head)
        if final:
            self._save_state(conn, batch_id, plan)
        self._commit(conn)
        return len(step.rows)

    def _remote_shards(
        self,
        shards: dict[int, dict[Target, TableChanges]],
        step: Step,
        checkpoint: tuple[Any, ...],
        done: set[int],
    ) -> set[int]:
        """Run the shards not in `done` through `remote`; the shards committed afterwards.
        A failure there is logged: the driver then runs what is left itself (and names the
        event a failing statement stumbled on)."""
        assert self.remote is not None
        writes = [
            ShardWrite(
                self._conn_settings,
                self._db,
                self.job,
                s,
                checkpoint,
                tuple(shipped(tc) for tc in shards.get(s, {}).values()),
                self._statement_bytes,
            )
            for s in range(self._parallelism)
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
        return self._done_shards(checkpoint[0], checkpoint[1])

    def _shard_tx(
        self,
        conn: Connection[Any],
        tables: dict[Target, TableChanges],
        step: Step,
        checkpoint: tuple[Any, ...],
        shard: int,
    ) -> None:
        def whole() -> None:
            self._write(conn, tables, step)
            self._checkpoint(conn, checkpoint, shard, sum(len(t) for t in tables.values()))
            self._commit(conn)

        _retry_conflicts(conn, whole, f"batch {checkpoint[0]} step {checkpoint[1]} shard {shard}")

    def _unique_keys(self, target: Target) -> tuple[tuple[str, ...], ...]:
        """The target's unique keys (the primary key included: it may differ from the
        upstream one), from the sink's information_schema; cached until the next DDL."""
        found = self._unique.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "unique keys",
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        )
        keys: dict[str, list[str]] = {}
        for index, column in rows:
            keys.setdefault(str(index), []).append(str(column))
        found = self._unique[target] = tuple(tuple(cols) for cols in keys.values())
        return found

    def _generated(self, target: Target) -> frozenset[str]:
        """The target's generated columns (lower case), from the sink's information_schema
        (MariaDB: NULL expression for the others, MySQL: empty); cached until the next DDL."""
        found = self._generated_columns.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "generated columns",
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND COALESCE(GENERATION_EXPRESSION, '') <> ''",
        )
        found = self._generated_columns[target] = frozenset(str(r[0]).lower() for r in rows)
        return found

    def _folds(self, target: Target) -> dict[str, Fold]:
        """How the sink compares each column of the target (lower case → `keys.Fold`, from
        its collation in the sink's information_schema); cached until the next DDL."""
        found = self._column_folds.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "column collations",
            "SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        )
        found = self._column_folds[target] = {
            str(name).lower(): fold_of(None if collation is None else str(collation))
            for name, collation in rows
        }
        return found

    def _information_schema(self, target: Target, what: str, sql: str) -> tuple[Any, ...]:
        """The rows of `sql` (which takes the target's schema and table) on a connection of
        their own, in autocommit: they are looked up while a step's transaction is open on
        the first connection (a target first met in a later chunk), which a read there
        would have to end — committing part of the step — or race with the pipelined write
        of the chunk before (`_Pipeline`)."""
        if self._catalog_conn is None:
            self._catalog_conn = self._connect()
            self._catalog_conn.autocommit(True)
        with db_errors(f"reading the {what} of {target}"), self._catalog_conn.cursor() as cur:
            cur.execute(sql, (target.schema, target.table))
            return tuple(cur.fetchall())

    def _shard_of(self, target: Target, skeleton: tuple[Value, ...]) -> int:
        """The shard that owns a key, by its skeleton (`keys.sink_key`, which collapse hands
        over): keys the sink's collation calls equal are one row, written by one shard."""
        return (
            zlib.crc32(repr((target.schema, target.table, skeleton)).encode()) % self._parallelism
        )

    def _done_shards(self, batch_id: int, step: int) -> set[int]:
        conn = self._conns[0]
        with db_errors("reading shard checkpoints"), conn.cursor() as cur:
            cur.execute(
                f"SELECT shard FROM {self._db}.apply_checkpoint "
                "WHERE job = %s AND batch_id = %s AND step = %s",
                (self.job, batch_id, step),
            )
            rows = cur.fetchall()
        conn.commit()
        return {int(r[0]) for r in rows}

    def _commit(self, conn: Connection[Any]) -> None:
        with db_errors("committing a batch"):
            conn.commit()

    def _checkpoint(
        self, conn: Connection[Any], cp: tuple[Any, ...], shard: int, rows: int
    ) -> None:
        batch_id, step, offsets, watermark, ddl = cp
        with db_errors("writing the checkpoint"), conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self._db}.apply_checkpoint (job, batch_id, step, shard, offsets, "
                "watermark, row_count, ddl, committed_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
                (self.job, batch_id, step, shard, offsets, watermark, rows, ddl),
            )

    def _advance(self, conn: Connection[Any], old: Head | None, new: Head) -> Head:
        """Move the head from `old` to `new`; CheckpointConflictError if it is not `old`."""
        with db_errors("advancing the apply head"), conn.cursor() as cur:
            if old is None:
                try:
                    cur.execute(
                        f"INSERT INTO {self._db}.apply_head (job, batch_id, step, phase, "
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
                f"UPDATE {self._db}.apply_head SET batch_id = %s, step = %s, phase = %s, "
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

    def _save_state(self, conn: Connection[Any], batch_id: int, plan: Plan) -> None:
        spill = plan.spill if isinstance(plan.spill, PieceSpill) else None
        with db_errors("writing the apply state"), conn.cursor() as cur:
            self.state_store.save(cur, batch_id, plan.state, spill)
            self._saved = (batch_id, plan.state)
            # The batch is complete: a replay is a skip, its gate answers are not needed.
            cur.execute(
                f"DELETE FROM {self._db}.apply_gate WHERE job = %s AND batch_id <= %s",
                (self.job, batch_id),
            )
            cur.execute(
                f"DELETE FROM {self._db}.apply_state WHERE job = %s AND batch_id < %s",
                (self.job, batch_id),
            )

    def _write(self, conn: Connection[Any], tables: dict[Target, TableChanges], step: Step) -> None:
        try:
            with conn.cursor() as cur:
                for tc in tables.values():
                    write_table(cur, tc, self._statement_bytes)
                    if self.seen.running and self._parallelism == 1:
                        rows = ((c, v) for c, v, _ in tc.upserts.values())
                        self.seen.add(cur, tc.target, rows, self._statement_bytes)
        except pymysql.err.MySQLError as exc:
            conn.rollback()
            if mysql.classify(exc) is not mysql.Kind.OTHER:
                raise _apply_error(exc, "writing rows") from exc
            raise self._diagnose(conn, tables, exc) from exc

    def _diagnose(
        self,
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

    def _apply_marker(
        self, marker: SnapshotBegin | SnapshotEnd, head: Head | None, new: Head
    ) -> Head:
        """A snapshot marker, with the head moved past it in the same sink transaction (a
        replayed one does again what its first attempt did not commit)."""
        conn = self._conns[0]
        target = self.seen.target(marker)
        drop = False
        with db_errors(f"applying a {type(marker).__name__}"), conn.cursor() as cur:
            if target is not None and isinstance(marker, SnapshotBegin):
                self.seen.begin(cur, target)
            elif target is not None:
                drop = self.seen.end(cur, target)
            head = self._advance(conn, head, new)
            conn.commit()
            if drop:
                assert target is not None
                self.seen.drop(cur, target)
        log.info("job %s: %s of %s applied", self.job, type(marker).__name__, target)
        return head

    def _apply_ddl(self, env: Envelope) -> None:
        ev = env.event
        assert isinstance(ev, DdlChange)
        try:
            self._ddl.apply(ev)
        except BadEventError as exc:
            raise BadEventError(exc.reason, env.position) from exc

    def _ddl_connection(self) -> Connection[Any]:
        """A new autocommit connection for one DDL (the executor closes it)."""
        conn = self._connect()
        conn.autocommit(True)
        return conn


def _retry_conflicts(conn: Connection[Any], transaction: Callable[[], None], what: str) -> None:
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


class _Pipeline:
    """Runs writes on one connection, in order, one at a time, on `writer` (None: inline)
    while the caller prepares the next: at most one write is in flight, so at most two
    chunks are in memory. The writes hold `lock` (whoever else uses the connection meanwhile
    takes it too). A write's failure is raised by the next `submit` or on leaving the
    block, after which nothing more is written; leaving the block waits for the write in
    flight, so afterwards the connection is the caller's alone again."""

    def __init__(self, writer: ThreadPoolExecutor | None, lock: threading.RLock) -> None:
        self._writer = writer
        self._lock = lock
        self._pending: Future[None] | None = None

    def submit(self, write: Callable[..., None], *args: Any) -> None:
        self._wait()
        if self._writer is None:
            write(*args)
            return
        self._pending = self._writer.submit(self._locked, write, *args)

    def _locked(self, write: Callable[..., None], *args: Any) -> None:
        with self._lock:
            write(*args)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> _Pipeline:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self._wait()
            return
        # The block failed: its error wins, but not before the connection is free again.
        with contextlib.suppress(Exception):
            self._wait()


def _zero(target: Target, key: tuple[Value, ...]) -> int:
    return 0


def _chunks(rows: Iterable[Envelope], size: int) -> Iterator[list[Envelope]]:
    it = iter(rows)
    while part := list(islice(it, size)):
        yield part


def write_table(cur: Any, tc: TableChanges, max_bytes: int = STATEMENT_BYTES) -> None:
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
        lenient.upsert(cur, tc.target, cols, tc.key_columns, rows, max_bytes)
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
