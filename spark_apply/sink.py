"""The MySQL/MariaDB sink: a batch's rows, its checkpoint and its stash in one transaction.

Lifecycle: ``MySQLSink(...)`` does no I/O; `start()` connects and creates the state tables;
`previous_state(batch_id)` says what the batch builds on (None: already committed, skip it);
`apply(batch_id, plan)` commits it; `close()` disconnects.

`MySQLSink` is `sinks.Sink` — the step loop over the job's bookkeeping in the state database
(`ledger.Ledger`: head, checkpoints, state, stash, gates) — composed with `MySQLRows`, the
MySQL kind of sink (`sinks.SinkKind`): rows as SQL on the ledger's own connection, so a
step's rows, its checkpoint row, the head and the state commit in one transaction. What the
sink's `information_schema` says of a target is `sink_schema.SinkSchema`'s; parallel mode's
shards are `shard_writes.ShardedSteps`'; the SQL of collapsed changes is `table_writes`'.

Guarantee: exactly once. Every transaction advances the job's *head* row with a precondition
(``UPDATE … WHERE`` the head it read), so a batch is applied on top of the batch before it or not
at all; a replayed batch that is committed is skipped, one that is half-way (a DDL step, or some
shards in parallel mode) resumes after its last committed part (`sinks.Sink.apply`). The state
tables: `ledger`.

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
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

from pymysql.connections import Connection

from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd
from rowbus.protocol.values import Value
from rowbus.routing.routes import Router, Target
from rowbus.spark_apply.changes import STATEMENT_BYTES, SchemaLookup, collapse
from rowbus.spark_apply.ddl import SinkDdl
from rowbus.spark_apply.exceptions import BadEventError
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.ledger import Head, Ledger, offsets_json
from rowbus.spark_apply.planner import Envelope, Plan, PlannerState
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.shard_writes import ShardedSteps, ShardWrite
from rowbus.spark_apply.sink_conn import connect_sink, retry_conflicts
from rowbus.spark_apply.sink_schema import SinkSchema
from rowbus.spark_apply.sinks import Sink, StepWrite
from rowbus.spark_apply.snapshots import SeenSets
from rowbus.spark_apply.table_writes import write_tables

log = logging.getLogger(__name__)

CHUNK_ROWS = 20_000
"""Rows of a step collapsed and written at a time (snapshot mode): a released 1M-row
transaction is read, collapsed and rendered a chunk at a time, never whole."""


class MySQLRows:
    """The MySQL kind of sink (`sinks.SinkKind`): a step's rows collapsed and written as SQL,
    markers' seen sets, DDL at its barrier. Its first connection is the ledger's."""

    def __init__(
        self,
        conn: SinkConnection,
        job: str,
        state_database: str,
        router: Router,
        schemas: SchemaLookup,
        seen: SeenSets,
        parallelism: int,
    ) -> None:
        self._settings = conn
        self._router = router
        self._schemas = schemas
        self._seen = seen
        self._parallelism = parallelism
        self._conn: Connection[Any] | None = None
        self._extra: list[Connection[Any]] = []
        self._writer: ThreadPoolExecutor | None = None
        self._lock = threading.RLock()
        self.schema = SinkSchema(self._connect)
        self.shards = ShardedSteps(parallelism) if parallelism > 1 else None
        """Parallel mode's shard writes (None in snapshot mode)."""
        self._ddl = SinkDdl(router, self._ddl_connection, state_database, job)
        self.statement_bytes = STATEMENT_BYTES
        """The longest statement rendered: below the server's max_allowed_packet (`start`)."""
        self.chunk_rows = CHUNK_ROWS
        """Snapshot mode: rows collapsed and written at a time within a step's transaction."""

    def _connect(self) -> Connection[Any]:
        return connect_sink(self._settings)

    def start(self, ledger: Ledger) -> None:
        self._conn = ledger.conn
        self._lock = ledger.lock
        # Rows too: no statement may approach the server's packet limit.
        self.statement_bytes = min(STATEMENT_BYTES, ledger.packet // 4)
        if self.shards is not None:
            self._extra = [self._connect() for _ in range(self._parallelism - 1)]
            self.shards.start(ledger, [ledger.conn, *self._extra])
        else:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="sink-writer")

    def close(self) -> None:
        if self.shards is not None:
            self.shards.close()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None
        for conn in self._extra:
            with contextlib.suppress(Exception):
                conn.close()
        self._extra = []
        self._conn = None  # the ledger's: it closes it
        self.schema.close()

    def write_rows(self, step: StepWrite) -> None:
        if self.shards is not None:
            shards = collapse(
                step.step.rows,
                self._router,
                self._schemas,
                self.shards.shard_of,
                self.schema.unique_keys,
                self.schema.generated,
                self.schema.folds,
            )
            self.shards.write(step, shards, self.statement_bytes, self._seen)
            return
        conn = self._conn
        assert conn is not None

        def whole() -> None:
            # The step's rows in chunks, each collapsed and written before the next is
            # read (a chunk's writes are those of a step of its own: applying contiguous
            # parts in order passes through the same states), all in this transaction.
            # Each chunk is written on the writer thread while this one collapses the
            # next: the server executes a chunk's statements while Python prepares the
            # next one (the GIL is free while the writer waits on the socket).
            written = 0
            with _Pipeline(self._writer, self._lock) as pipe:
                for part in _chunks(step.step.rows, self.chunk_rows):
                    shards = collapse(
                        part,
                        self._router,
                        self._schemas,
                        _zero,
                        self.schema.unique_keys,
                        self.schema.generated,
                        self.schema.folds,
                    )
                    tables = shards.get(0, {})
                    pipe.submit(write_tables, conn, tables, self.statement_bytes, self._seen)
                    written += sum(len(t) for t in tables.values())
            step.finish(conn, written)

        retry_conflicts(conn, whole, f"batch {step.batch_id} step {step.index}")

    def marker(
        self, cur: Any, marker: SnapshotBegin | SnapshotEnd, target: Target | None
    ) -> Callable[[], None] | None:
        if target is None:
            return None
        if isinstance(marker, SnapshotBegin):
            self._seen.begin(cur, target)
            return None
        if self._seen.end(cur, target):
            return lambda: self._seen.drop(cur, target)
        return None

    def ddl(self, env: Envelope, batch_id: int, index: int) -> None:
        # A DDL may add or drop unique keys and generated columns.
        self.schema.clear()
        ev = env.event
        assert isinstance(ev, DdlChange)
        try:
            self._ddl.apply(ev)
        except BadEventError as exc:
            raise BadEventError(exc.reason, env.position) from exc

    def batch_done(self, batch_id: int) -> None:
        pass

    def _ddl_connection(self) -> Connection[Any]:
        """A new autocommit connection for one DDL (the executor closes it)."""
        conn = self._connect()
        conn.autocommit(True)
        return conn


class MySQLSink(Sink):
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
        seen = SeenSets(router)
        self.rows = MySQLRows(
            conn,
            job,
            state_database,
            router,
            schemas,
            seen,
            parallelism if mode == "parallel" else 1,
        )
        super().__init__(Ledger(conn, job, state_database), self.rows, seen)

    @property
    def remote(self) -> Callable[[list[ShardWrite]], object] | None:
        """Parallel mode: runs shard transactions elsewhere (the apply job: as Spark tasks on
        the executors, `rowbus.spark_apply.shard_writes`); None: on this process's threads."""
        return None if self.rows.shards is None else self.rows.shards.remote

    @remote.setter
    def remote(self, run: Callable[[list[ShardWrite]], object] | None) -> None:
        if self.rows.shards is not None:
            self.rows.shards.remote = run

    @property
    def chunk_rows(self) -> int:
        return self.rows.chunk_rows

    @chunk_rows.setter
    def chunk_rows(self, rows: int) -> None:
        self.rows.chunk_rows = rows

    @property
    def statement_bytes(self) -> int:
        return self.rows.statement_bytes

    @property
    def settings(self) -> SinkConnection:
        return self.ledger.settings

    @property
    def state_db(self) -> str:
        """The quoted state database."""
        return self.ledger.db

    # -- throughput mode (`rowbus.spark_apply.throughput`) ------------------------------------

    def stored_tasks(self, batch_id: int) -> int | None:
        return self.ledger.stored_tasks(batch_id)

    def batch_tasks(self, batch_id: int, tasks: int) -> int:
        return self.ledger.batch_tasks(batch_id, tasks)

    def commit_owned(self, batch_id: int, state: PlannerState, rows: int) -> None:
        """Throughput batch `batch_id` is whole in the sink (every task's marker committed):
        its head, its closing marker (shard -1) and its state, in one transaction whose
        precondition is the head of the batch before."""
        ledger = self.ledger
        head = ledger.head()
        if head is not None and (
            head.batch_id > batch_id or (head.batch_id == batch_id and head.complete)
        ):
            return
        conn = ledger.conn
        cp = (batch_id, 0, offsets_json(state), state.released_through, None)
        ledger.checkpoint(conn, cp, -1, rows)
        ledger.advance(conn, head, Head(batch_id, 0, "done", True))
        ledger.save_state(conn, batch_id, Plan((), state, state.released_through))
        ledger.commit(conn)

    def target_keys(self, target: Target) -> tuple[tuple[tuple[str, ...], ...], frozenset[str]]:
        """The target's unique keys and generated columns (cached until the next DDL)."""
        return self.rows.schema.unique_keys(target), self.rows.schema.generated(target)

    def target_folds(self, target: Target) -> dict[str, Fold] | None:
        """How the sink compares each column of the target (cached until the next DDL), or
        None when the sink has no such table yet (not cached: it may appear)."""
        return self.rows.schema.target_folds(target)


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
