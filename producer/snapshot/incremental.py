"""Incremental snapshots while streaming (`rowbus snapshot TABLE…`; PROTOCOL.md §9.5 item 5).

DBLog's watermark algorithm, one chunk at a time, on the streaming thread between transactions:

1. When the stream stands between transactions at *S* and a table is waiting, one chunk (the
   next `chunk_rows` keys after the last one published) is read in a read view. Its low
   watermark *L* is the last binlog position the rows may predate and its high watermark *H* the
   first one they may show. On MariaDB the read view's ``binlog_snapshot_position`` is exact, so
   L = H and the step drops nothing; with a view known only between two positions (MySQL GTID
   read before and after the SELECT) L < H.
2. The stream goes on. Every row change of the chunk's table between L and H marks its keys:
   those rows are dropped from the chunk (the stream carries their newer state). A DDL of the
   table in the window discards the chunk (read again, with the new columns).
3. When the stream reaches H (the next transaction lies after it, or the server's heartbeat
   says the reader caught up to it), the chunk's remaining rows are published as `Op.READ` rows
   just after H (`position` offset H + 1, which no binlog event ends at), one Kafka transaction
   with the checkpoint that records the chunk's last key. Every streamed change published
   before them ends at or before H and every one after them after H + 1, so a consumer never
   sees a read row overwrite a newer streamed change, nor one share its order key.

A reader restart loses at most the chunk in flight: it is read again from the last key the
checkpoint holds. Keyless tables are refused (they cannot be chunked, and their rows have no
identity to drop by, §9.3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import DdlItem, Transaction
from rowbus.producer.definitions import just_after
from rowbus.producer.snapshot.signals import SignalWatch
from rowbus.producer.snapshot.source import ReadView, open_views
from rowbus.producer.snapshot.state import Backfill, SnapshotState, _before
from rowbus.protocol.events import BinlogPosition, TableSchema
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

POLL_EVERY_S = 1.0

Emit = Callable[[TableSchema, list[tuple[Value, ...]], str, BinlogPosition], None]
"""Publishes a chunk's rows at a position (the reader: `Batcher.add_snapshot`); the chunk is
committed with the checkpoint by `commit`, after its markers."""
EmitDdl = Callable[[TableSchema, list[str], str, BinlogPosition], None]
"""Publishes the statements that create a table, before its first chunk's rows."""
EmitMarker = Callable[[TableSchema, str, BinlogPosition, int | None], None]
"""Publishes a snapshot marker (PROTOCOL.md §9.7) of a table: the snapshot's id, its position,
and the rows published (None: a `snapshot_begin`)."""


@dataclass
class InFlight:
    """A chunk read, waiting for the stream to reach its high watermark."""

    table: TableSchema
    rows: list[tuple[Value, ...]]
    low: BinlogPosition
    high: BinlogPosition
    last: bool
    changed: set[tuple[Value, ...]] = field(default_factory=set)
    stale: bool = False
    creates: tuple[str, ...] = ()
    """The table's CREATE statements, published before its first chunk (PROTOCOL.md §9.5)."""

    def key(self, row: tuple[Value, ...]) -> tuple[Value, ...]:
        return tuple(row[i] for i in self.table.pk_indexes)

    def observe(self, txn: Transaction) -> None:
        """Mark the chunk's keys that `txn` changed between the watermarks."""
        name = self.table.qualified
        for item in txn.changes:
            if not (_before(self.low, item.position) and not _before(self.high, item.position)):
                continue
            if isinstance(item, DdlItem):
                if any(f"{t.schema}.{t.table}" == name for t in item.parsed.touched):
                    self.stale = True
            elif item.table.qualified == name:
                pk = item.table.pk_indexes
                for image in (item.before, item.after):
                    if image is not None:
                        self.changed.add(tuple(image[i] for i in pk))

    def kept(self) -> list[tuple[Value, ...]]:
        if not self.changed:
            return self.rows
        return [r for r in self.rows if self.key(r) not in self.changed]


class Holder(Protocol):
    """What carries the snapshot state into the checkpoint (the reader's term)."""

    snapshot: SnapshotState | None
    resume: BinlogPosition


class Incremental:
    """The incremental snapshots of one reader term. `holder.snapshot` is the term's snapshot
    state (made on first need: a reader that never snapshotted); `schema_of(schema, table)` the
    table's schema on the server now (None: no such table); `wanted(schema, table)` whether the
    reader's filter streams it."""

    def __init__(
        self,
        source: SourceConnection,
        where: str,
        watch: SignalWatch | None,
        chunk_rows: int,
        holder: Holder,
        schema_of: Callable[[str, str], TableSchema | None],
        wanted: Callable[[str, str], bool],
        emit: Emit,
        clock: Callable[[], float] = time.monotonic,
        emit_ddl: EmitDdl | None = None,
        emit_marker: EmitMarker | None = None,
        commit: Callable[[], None] | None = None,
    ) -> None:
        self._commit = commit
        self._emit_rows = emit
        self._emit_ddl = emit_ddl
        self._emit_marker = emit_marker
        self._source, self._where, self._watch = source, where, watch
        self._chunk_rows = chunk_rows
        self._holder, self._schema_of, self._wanted = holder, schema_of, wanted
        self._clock = clock
        self._polled = -POLL_EVERY_S
        self._view: ReadView | None = None
        self._schemas: dict[str, TableSchema] = {}
        self.flight: InFlight | None = None

    def _state(self) -> SnapshotState:
        if self._holder.snapshot is None:
            now = time.time()
            self._holder.snapshot = SnapshotState(
                self._holder.resume, {}, done=True, started=now, finished=now
            )
        return self._holder.snapshot

    # ---- signals -----------------------------------------------------------------------------

    def ask(self, tables: list[str]) -> None:
        """Queue `tables` (``db.table``); a table already queued or running keeps its place,
        one done is read again from its start."""
        state = self._state()
        for name in tables:
            schema, _, table = name.partition(".")
            found = self._schema_of(schema, table) if table else None
            refused = None
            if found is None or not self._wanted(schema, table):
                refused = "not a table this reader streams"
            elif not found.primary_key:
                refused = (
                    "it has no primary key: keyless rows read while streaming cannot be told "
                    "apart from the streamed changes (PROTOCOL.md §9.7); a reset snapshot "
                    "replaces it whole"
                )
            if refused is not None:
                log.warning("incremental snapshot of %s refused: %s", name, refused)
                state.backfills[name] = Backfill(name=name, done=True, refused=refused)
                continue
            running = state.backfills.get(name)
            if running is None or running.done:
                state.backfills[name] = Backfill(name=name)
                log.info("incremental snapshot of %s on %s queued", name, self._where)

    def poll(self) -> None:
        now = self._clock()
        if self._watch is None or now - self._polled < POLL_EVERY_S:
            return
        self._polled = now
        asked = self._watch.poll()
        for tables in asked:
            self.ask(tables)
        if asked or self._holder.snapshot is not None:
            self._state().signal_offset = self._watch.offset

    # ---- the watermark steps -----------------------------------------------------------------

    def rewind(self) -> None:
        """The stream restarts from the last checkpoint: the chunk in flight is read again."""
        self.flight = None

    def read_next(self, stream_at: BinlogPosition) -> None:
        """Between transactions at `stream_at`: read the next chunk if none is in flight."""
        state = self._holder.snapshot
        if self.flight is not None or state is None:
            return
        pending = [b for b in state.backfills.values() if not b.done]
        if not pending:
            return
        job = pending[0]
        table = self._schema(job.name)
        if table is None or not table.primary_key:
            job.done, job.refused = True, "the table is gone or lost its primary key"
            log.warning("incremental snapshot of %s stopped: %s", job.name, job.refused)
            return
        if self._view is None:
            self._view = open_views(self._source, 1, self._where)[0]
        else:
            self._view.renew()
        try:
            rows = self._view.read_chunk(table, job.after, self._chunk_rows)
            at = replace(self._view.position, upstream=stream_at.upstream)
            first = job.chunks == 0 and self._emit_ddl is not None
            creates = tuple(self._view.create_statements(table)) if first else ()
        finally:
            self._view.end()
        # The view is exact (MariaDB): L = H. A stream ahead of it cannot be: it reads only
        # what the server committed, so H >= stream_at.
        self.flight = InFlight(table, rows, at, at, len(rows) < self._chunk_rows, creates=creates)

    def _schema(self, name: str) -> TableSchema | None:
        schema, _, table = name.partition(".")
        return self._schema_of(schema, table)

    def idle(self, at: BinlogPosition) -> None:
        """The stream read everything the server has, up to `at`: publish a chunk due, take
        signals, read the next chunk (due at once when nothing was committed meanwhile)."""
        self.reached(at)
        self.poll()
        self.read_next(at)
        self.reached(at)

    def after(self, at: BinlogPosition, in_transaction: bool) -> None:
        """A transaction ending at `at` was published."""
        if self.flight is None and not self.busy and self._watch is None:
            return  # the common case: nothing asked, nothing to follow
        self.reached(at)
        if not in_transaction:
            self.poll()
            self.read_next(at)

    def before(self, txn: Transaction) -> None:
        """Before the stream publishes `txn`: publish the chunk first if `txn` lies after its
        high watermark, else note what `txn` changes in the window."""
        flight = self.flight
        if flight is None:
            return
        if _before(flight.high, txn.end):
            self._emit()
        else:
            flight.observe(txn)

    def reached(self, at: BinlogPosition) -> None:
        """The stream has published everything up to `at`: publish a chunk whose high
        watermark is at or before it."""
        if self.flight is not None and not _before(at, self.flight.high):
            self._emit()

    def ahead(self, at: BinlogPosition) -> None:
        """The stream is about to publish changes at `at` (a fragment of a big transaction):
        a chunk whose high watermark lies before them goes first."""
        if self.flight is not None and _before(self.flight.high, at):
            self._emit()

    def _emit(self) -> None:
        flight, self.flight = self.flight, None
        assert flight is not None
        if flight.stale:
            return  # a DDL of the table in the window: read again with its new columns
        state = self._state()
        job = state.backfills.get(flight.table.qualified)
        if job is None or job.done:
            return
        kept = flight.kept()
        # Just after H: a streamed event ending at H (a DDL, an XA COMMIT's rows) would
        # otherwise share the chunk's order key (PROTOCOL.md §9.5 item 5).
        at = just_after(flight.high)
        if job.chunks == 0 and self._emit_marker is not None:
            # The begin before the definitions and the first rows, in their Kafka transaction.
            job.marker = f"snapshot:incremental:{job.name}:{at.upstream}/{at.file}:{at.offset}"
            self._emit_marker(flight.table, job.marker, at, None)
        if flight.creates and self._emit_ddl is not None:
            self._emit_ddl(
                flight.table,
                list(flight.creates),
                f"snapshot:incremental:{job.name}:create",
                at,
            )
        if kept:
            self._emit_rows(
                flight.table,
                kept,
                f"snapshot:incremental:{job.name}:{job.chunks}:{flight.high.upstream}/"
                f"{flight.high.file}:{flight.high.offset}",
                at,
            )
        job.rows += len(kept)
        job.chunks += 1
        if flight.rows:
            job.after = flight.key(flight.rows[-1])
        ended = False
        if flight.last:
            job.done = True
            if job.marker is not None and self._emit_marker is not None:
                # After the last chunk's rows, in their Kafka transaction (§9.7).
                self._emit_marker(flight.table, job.marker, at, job.rows)
                ended = True
        if self._commit is not None and (kept or ended or job.marker is not None):
            # the chunk, its markers and the state that says they are out, in one transaction
            self._commit()
        if flight.last:
            log.info(
                "incremental snapshot of %s done: %s rows in %d chunks",
                job.name,
                f"{job.rows:,}",
                job.chunks,
            )

    @property
    def busy(self) -> bool:
        """Whether a chunk waits, or a table does."""
        if self.flight is not None:
            return True
        state = self._holder.snapshot
        return state is not None and any(not b.done for b in state.backfills.values())

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        if self._view is not None:
            self._view.close()
            self._view = None
