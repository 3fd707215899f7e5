"""The reader's snapshots inside a term: the initial (or reset) one read chunk by chunk before
streaming, the incremental ones asked for while streaming, and their markers.

`SnapshotDriver.read` reads a term's pending tables (`rowbus.producer.snapshot.runner`), each
chunk committed with the checkpoint that carries the snapshot's progress, so a restarted reader
resumes from its last chunk. `incremental` gives the term's `Incremental` snapshots, whose rows,
definitions and markers go into the batch being read. `snapshot` is the running or last
snapshot's progress (for status and benchmarks).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import Transaction
from rowbus.producer.settings import ReaderSettings
from rowbus.producer.snapshot.incremental import Incremental
from rowbus.producer.snapshot.initial import unshown
from rowbus.producer.snapshot.progress import Progress
from rowbus.producer.snapshot.runner import ChunkReader
from rowbus.producer.snapshot.signals import SignalWatch
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.producer.tables import TableFilter
from rowbus.producer.term import Term
from rowbus.protocol.events import (
    BinlogPosition,
    MarkerMode,
    TableSchema,
    TxnRef,
    snapshot_marker,
)
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)


def snapshot_id(state: SnapshotState, table: str) -> str:
    """The id of an initial or reset snapshot of `table` (PROTOCOL.md §9.7), and the prefix of
    its transactions' ids: its position names the snapshot (a reset one has a higher
    upstream), so it is unique in the source (§9.5 item 2). A table read again from its start
    after a restart (keyless, or a key not all-integer) is a new snapshot of it: its id names
    the attempt, and its new `snapshot_begin` supersedes the first (§9.7)."""
    pos = state.position
    progress = state.tables.get(table)
    again = f":again{progress.restarts}" if progress is not None and progress.restarts else ""
    return f"snapshot:{pos.upstream}/{pos.file}:{pos.offset}:{table}{again}"


def past_snapshot(snap: SnapshotState | None, txn: Transaction) -> Transaction:
    """`txn` without the changes the rows of a resumed snapshot already show."""
    if snap is not None and snap.tables and snap.done:
        if any(snap.filtering(c.position) for c in txn.changes):
            return unshown(snap, txn)
        if not snap.filtering(txn.end) and any(t.segments for t in snap.tables.values()):
            snap.compact()  # streaming passed every read view
    return txn


class SnapshotDriver:
    """Reads a term's snapshots into its batches; `commit(term)` commits the open batch."""

    def __init__(
        self,
        source: SourceConnection,
        settings: ReaderSettings,
        kafka_config: Mapping[str, object],
        table_filter: TableFilter,
        commit: Callable[[Term], None],
        wall: Callable[[], float],
    ) -> None:
        self.source = source
        self.settings = settings
        self._kafka = kafka_config
        self._filter = table_filter
        self._commit = commit
        self._wall = wall
        self.snapshot: SnapshotState | None = None
        """The running or last snapshot's progress (for status and benchmarks)."""

    def read(self, term: Term, stop: threading.Event) -> bool:
        """Read the snapshot's pending tables, each chunk committed with the checkpoint; True
        when it is complete, False when `stop` came first (the next term resumes it)."""
        prepared, state = term.prepared, term.snapshot
        assert prepared is not None
        assert state is not None
        term.prepared = None
        pending = [
            (prepared.schemas[t.name], t.last_key)
            for t in state.pending()
            if t.name in prepared.schemas
        ]
        for t in state.pending():
            if t.name not in prepared.schemas:
                t.done = True
        self.snapshot = state
        # Read before the chunk readers share the views: what creates each table not yet begun.
        creates = {
            t.name: prepared.views[0].create_statements(prepared.schemas[t.name])
            for t in state.pending()
            if t.chunks == 0 and t.name in prepared.schemas
        }
        reader = ChunkReader(
            prepared.views,
            pending,
            self.settings.snapshot_chunk_rows,
            cut_keyless=self.settings.snapshot_markers,
        )
        progress = Progress(state)
        for gone in prepared.gone:
            # A reset snapshot's table the source no longer has: it holds no rows (§9.7);
            # committed with the first chunk, and not again after a restart (not "gone" then).
            self.marker(term, gone, snapshot_id(state, gone.qualified), None)
            self.marker(term, gone, snapshot_id(state, gone.qualified), 0)
        try:
            for chunk in reader.chunks():
                table = state.tables[chunk.table.qualified]
                create = creates.pop(table.name, None)
                if create is not None and self.settings.snapshot_markers:
                    # the first chunk: the begin goes before the definitions (§9.7)
                    self.marker(term, chunk.table, snapshot_id(state, table.name), None)
                if create is not None:
                    state.seq += term.batcher.add_snapshot_ddl(
                        chunk.table,
                        create,
                        f"{snapshot_id(state, table.name)}:create",
                        state.seq,
                        state.position,
                        self._wall(),
                    )
                if chunk.rows:
                    term.batcher.add_snapshot(
                        chunk.table,
                        chunk.rows,
                        # unique in the source: a reset snapshot's chunks must not share the
                        # ids of the initial one's, or a consumer holding both merges them
                        f"{snapshot_id(state, table.name)}:{state.restarts}:{table.chunks}",
                        state.seq,
                        state.position,
                        self._wall(),
                    )
                    state.seq += len(chunk.rows)
                    table.rows += len(chunk.rows)
                    table.last_key = chunk.last_key
                table.chunks += 1
                table.done = chunk.last
                if chunk.last and self.settings.snapshot_markers:
                    self.marker(term, chunk.table, snapshot_id(state, table.name), table.rows)
                self._commit(term)
                progress.tick()
                if stop.is_set():
                    log.info("%s: snapshot stopped; it resumes from its last chunk", self.source)
                    return False
            state.done = True
            state.finished = self._wall()
            self._commit(term)
            progress.tick(force=True)
            log.info(
                "snapshot of %s done: %s rows in %d tables; streaming from binlog %s",
                self.source.name,
                f"{state.seq:,}",
                len(state.tables),
                state.position,
            )
            return True
        finally:
            reader.close()

    def marker(
        self,
        term: Term,
        table: TableSchema,
        snapshot: str,
        rows: int | None,
        at: BinlogPosition | None = None,
    ) -> None:
        """A `SnapshotBegin` (`rows` None) or `SnapshotEnd` of `table`'s snapshot `snapshot`,
        in the Kafka transaction of its first / last chunk, with the next index of the row
        counter: the checkpoint committed with it carries the counter and the chunks done, so
        a restarted reader publishes neither again (PROTOCOL.md §9.7). `at`: an incremental
        snapshot's chunk position (mode refresh); None: the initial or reset snapshot's
        position (mode replace)."""
        state = term.snapshot
        assert state is not None
        pos = state.position if at is None else at
        mode = MarkerMode.REPLACE if at is None else MarkerMode.REFRESH
        now = self._wall()
        ts, name = term.batcher.tick(now), self.source.name
        marker = snapshot_marker(
            source=name,
            ts=ts,
            schema=table.schema,
            table=table.table,
            snapshot=snapshot,
            mode=mode,
            position=pos,
            txn=TxnRef(f"{snapshot}:{'begin' if rows is None else 'end'}", state.seq),
            rows=rows,
        )
        term.batcher.add_marker(marker, now)
        state.seq += 1

    def incremental(self, term: Term) -> Incremental:
        """The term's incremental snapshots (signals followed with ``reader.signal_topic``);
        a new stream reads again from the checkpoint, so a chunk in flight is read again."""
        if term.incremental is None:
            topic = self.settings.signal_topic
            offset = 0 if term.snapshot is None else term.snapshot.signal_offset
            watch = (
                None if topic is None else SignalWatch(self._kafka, topic, self.source.name, offset)
            )

            def emit(
                table: TableSchema, rows: list[tuple[Value, ...]], txn: str, at: BinlogPosition
            ) -> None:
                state = self.snapshot = term.snapshot
                assert state is not None
                term.batcher.add_snapshot(table, rows, txn, state.seq, at, self._wall())
                state.seq += len(rows)

            def emit_ddl(
                table: TableSchema, statements: list[str], txn: str, at: BinlogPosition
            ) -> None:
                state = term.snapshot
                assert state is not None
                state.seq += term.batcher.add_snapshot_ddl(
                    table, statements, txn, state.seq, at, self._wall()
                )

            def emit_marker(
                table: TableSchema, snapshot: str, at: BinlogPosition, rows: int | None
            ) -> None:
                self.marker(term, table, snapshot, rows, at)

            term.incremental = Incremental(
                term.server.source,
                term.server.where,
                watch,
                self.settings.snapshot_chunk_rows,
                term,
                term.server.catalog.table_schema,
                self._filter.wanted,
                emit,
                emit_ddl=emit_ddl,
                emit_marker=emit_marker if self.settings.snapshot_markers else None,
                commit=lambda: self._commit(term),
            )
        term.incremental.rewind()
        return term.incremental
