"""The batcher: whole transactions in, the records of one Kafka transaction out (pure).

`Batcher` keeps the bookkeeping of a reader's output: each `Transaction` takes a tick of the
hybrid clock and its changes are planned (an update that moves its row to another key or
partition is a delete and an insert), a transaction too big to hold goes out in fragments
(`stream`, then `add` for its last part; see `rowbus.producer.fragments` and PROTOCOL.md §9.1),
a DDL whose schema after it is not known yet waits in the batch for its table's next table map,
and the batch is flushed when due (`due`, `take`). What each event becomes on Kafka is the
encoding's (`rowbus.producer.records.Records`: rowbus's protocol, or Debezium's). The records of
a transaction are never split across two batches, but for fragments. Every transaction, even one
with no wanted table, takes one tick of the hybrid clock, so the watermark written at a flush
(`Resolved` to every partition) covers everything read so far — except an open fragmented
transaction, which no watermark passes before its last fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from rowbus.producer.assembler import Change, DdlItem, RowItem, Transaction
from rowbus.producer.definitions import just_before
from rowbus.producer.fragments import OpenStream
from rowbus.producer.records import Batch, Image, Records, Slot
from rowbus.producer.tracker import DdlSchema
from rowbus.protocol.ddl import DdlKind, parse_ddl
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    Heartbeat,
    Op,
    ReaderCheckpoint,
    Resolved,
    SnapshotMarker,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.values import Value

Definition = tuple[TableSchema, Sequence[str]]
"""A table's schema and the statements that create it (PROTOCOL.md §9.6)."""
Planned = tuple[RowItem | DdlItem, Op, Image, Image]
"""A change as published: (item, op, before, after); a DDL's op and images are unused."""


@dataclass
class _PendingDdl:
    """A DDL whose records wait in the batch for its schema after the statement."""

    item: DdlItem
    ddl: DdlChange
    slots: list[Slot]


@dataclass(frozen=True)
class FlushPolicy:
    rows: int = 20_000
    bytes: int = 8 * 1024 * 1024
    interval_s: float = 0.2
    idle_interval_s: float = 1.0
    """A batch that only moves the position (no events) waits this long."""


DDL_SCHEMA_WAIT_S = 5.0
"""How long an open batch waits for the next row of a table a DDL changed (its after-schema)."""


class Batcher:
    """Builds batches for one source, rendered by `records`; `ddl_schema` gives the table
    schema after a DDL from the live server (when the binlog does not show it)."""

    def __init__(
        self,
        source: str,
        clock: HybridClock,
        records: Records,
        ddl_schema: Callable[[DdlItem], TableSchema | None],
        policy: FlushPolicy | None = None,
    ) -> None:
        self.source = source
        self.clock = clock
        self.records = records
        self._ddl_schema = ddl_schema
        self.policy = policy or FlushPolicy()
        self.batch = Batch()
        self._pending: dict[tuple[str, str], list[_PendingDdl]] = {}
        self._pending_since = 0.0
        self.open_stream: OpenStream | None = None
        """The transaction being published in fragments, if any."""

    # ---- transactions -----------------------------------------------------------------------

    def add(self, txn: Transaction, now: float, defining: Sequence[Definition] = ()) -> None:
        """Append `txn`'s records; stamps it with the next hybrid-clock tick. When `txn` is the
        transaction published in fragments, this is its last fragment. `defining`: tables to
        define first (PROTOCOL.md §9.6), at the same ts, just before its first event."""
        batch = self.batch
        if batch.started is None:
            batch.started = now
        if not self._pending:
            self._pending_since = now
        batch.end = txn.end
        batch.last_commit_time = txn.commit_time
        batch.stats.transactions += 1
        records = self.records
        records.opened(batch, txn.id, txn.commit_time)
        stream = self.open_stream
        if stream is not None:
            stream.check(txn.id, txn.gtid)
            self.open_stream = None
            if defining:
                self._define(defining, stream.ts, txn.id, txn.changes, stream)
            planned = list(self._plan(txn.changes))
            self._emit_stream(stream, planned, stream.next_index + len(planned))
            records.closed(batch)
            return
        ts = self.clock.next(txn.commit_time * 1000)
        if not txn.changes:
            records.closed(batch)
            return
        if defining:
            self._define(defining, ts, txn.id, txn.changes)
        planned = list(self._plan(txn.changes))
        count = len(planned)
        txn_id = txn.id
        for index, (item, op, before, after) in enumerate(planned):
            if isinstance(item, DdlItem):
                self._add_ddl(item, ts, TxnRef(txn_id, index, count))
            elif self._pending or not records.fast_row(
                batch, item, op, before, after, ts, txn_id, index, count
            ):
                self._add_row(item, op, before, after, ts, TxnRef(txn_id, index, count))
        batch.stats.events += count
        records.closed(batch)

    def stream(
        self,
        txn_id: str,
        gtid: str | None,
        changes: list[Change],
        now: float,
        defining: Sequence[Definition] = (),
    ) -> None:
        """Append a fragment of the open transaction `txn_id` (its events carry no count).

        The first fragment takes the transaction's tick: the one right after the clock's last
        (its commit time is not read yet), which a restarted reader computes again from the
        checkpoint's ts. `defining`: as in `add`."""
        batch = self.batch
        if batch.started is None:
            batch.started = now
        stream = self.open_stream
        if stream is None:
            stream = self.open_stream = OpenStream.start(self.clock)
        stream.check(txn_id, gtid)
        self.records.opened(batch, txn_id, None)
        if defining:
            self._define(defining, stream.ts, txn_id, changes, stream)
        self._emit_stream(stream, list(self._plan(changes)), None)

    def resume_stream(self, fragment: ReaderCheckpoint) -> None:
        """A restarted reader goes on with the stream its fragment record names (the clock
        is at the checkpoint's ts)."""
        self.open_stream = OpenStream.start(self.clock, fragment.position)
        self.records.resumed()

    def _emit_stream(
        self,
        stream: OpenStream,
        planned: list[Planned],
        count: int | None,
    ) -> None:
        assert stream.txn_id is not None
        emitted = 0
        for item, op, before, after in planned:
            index = stream.next_index
            stream.next_index += 1
            if stream.published(item.position):
                self.records.replayed(item)
                continue  # committed by the reader before a restart
            ref = TxnRef(stream.txn_id, index, count)
            if isinstance(item, DdlItem):
                self._add_ddl(item, stream.ts, ref)
            else:
                self._add_row(item, op, before, after, stream.ts, ref)
            stream.last = item.position
            emitted += 1
        self.batch.stats.events += emitted

    def add_schema(self, table: TableSchema) -> None:
        """Publish `table`'s schema record now (a schema-only snapshot), if not yet done."""
        self.records.schema(self.batch, table, self.clock.last)

    def add_snapshot(
        self,
        table: TableSchema,
        rows: list[tuple[Value, ...]],
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
        now: float,
    ) -> int:
        """Append snapshot rows (`Op.READ`, PROTOCOL.md §9.5) of `table` as one transaction of
        their own with the next clock tick; their `txn.index` counts on from `first_index`
        (the snapshot's row counter) and they all sit at `position`, the snapshot's. Returns
        the tick."""
        batch = self.batch
        if batch.started is None:
            batch.started = now
        ts = self.clock.next(int(now * 1000))
        read = Op.READ
        for i, after in enumerate(rows):
            item = RowItem(read, table, None, after, position)
            self._add_row(item, read, None, after, ts, TxnRef(txn_id, first_index + i))
            # Row 0 went the general way (it publishes the schema, resolves pending DDLs);
            # the encoding may take the others in one go.
            if i == 0 and self.records.snapshot_rows(
                batch, table, rows, ts, txn_id, first_index, position
            ):
                break
        batch.stats.events += len(rows)
        return ts

    def add_snapshot_ddl(
        self,
        table: TableSchema,
        statements: list[str],
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
        now: float,
    ) -> int:
        """Append the DDL that creates `table` (its database's and its own CREATE … IF NOT
        EXISTS) as one transaction before the table's first snapshot rows, at `position`, the
        snapshot's, with `txn.index` counting on from `first_index`. Returns how many."""
        batch = self.batch
        if batch.started is None:
            batch.started = now
        return self._add_definition(
            table, statements, self.clock.next(int(now * 1000)), txn_id, first_index, position
        )

    def add_marker(self, marker: SnapshotMarker, now: float) -> None:
        """Append a snapshot marker (PROTOCOL.md §9.7) to every partition of its table's topic,
        like a DDL; the caller stamps its ts (`tick`) and its index on the row counter."""
        batch = self.batch
        if batch.started is None:
            batch.started = now
        self.records.marker(batch, marker)
        batch.stats.events += 1

    def tick(self, now: float) -> int:
        """The next hybrid-clock tick (a marker's ts: a transaction of its own)."""
        return self.clock.next(int(now * 1000))

    def _add_definition(
        self,
        table: TableSchema,
        statements: Sequence[str],
        ts: int,
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
    ) -> int:
        for i, statement in enumerate(statements):
            parsed = parse_ddl(statement, table.schema)
            after = DdlSchema(known=True, table=table if parsed.table is not None else None)
            item = DdlItem(statement, table.schema, parsed, position, after)
            self._add_ddl(item, ts, TxnRef(txn_id, first_index + i))
        self.batch.stats.events += len(statements)
        return len(statements)

    def _define(
        self,
        defining: Sequence[Definition],
        ts: int,
        txn_id: str,
        changes: Sequence[Change],
        stream: OpenStream | None = None,
    ) -> None:
        """The definitions of tables met first in this transaction (PROTOCOL.md §9.6): one
        transaction `define:<id>` with the transaction's ts, just before its first event, so
        it is released first and no streamed event shares its order key."""
        at = just_before(changes[0].position)
        if stream is not None and stream.published(at):
            return  # committed with a fragment before a restart
        index = 0
        for table, statements in defining:
            index += self._add_definition(table, statements, ts, f"define:{txn_id}", index, at)

    @property
    def resume_ts(self) -> int:
        """The clock a checkpoint restores: the tick before an open stream's, since that
        transaction's records are not all committed yet."""
        return self.open_stream.before if self.open_stream is not None else self.clock.last

    def _plan(self, changes: list[Change]) -> Iterable[Planned]:
        for item in changes:
            if isinstance(item, DdlItem):
                yield item, Op.UPDATE, None, None
                continue
            if item.op is Op.UPDATE and self.records.moves(item):
                yield item, Op.DELETE, item.before, None
                yield item, Op.INSERT, None, item.after
                continue
            yield item, item.op, item.before, item.after

    def _add_row(
        self, item: RowItem, op: Op, before: Image, after: Image, ts: int, ref: TxnRef
    ) -> None:
        table = item.table
        if self._pending:
            self._resolve_ddls(table.schema, table.table, table)
        self.records.row(self.batch, item, op, before, after, ts, ref)

    def _add_ddl(self, item: DdlItem, ts: int, ref: TxnRef) -> None:
        """A DDL to every partition, with its schema after the statement: the reader's shadow
        schema's (`rowbus.producer.tracker`) when it modelled the statement. Otherwise from the
        binlog: the table map of the table's next row, for which the batch waits up to
        `DDL_SCHEMA_WAIT_S`; when none comes by then, from the live server (`ddl_schema`); when
        another DDL of the table comes first, none (the schema in between is not knowable)."""
        parsed = item.parsed
        target = parsed.table
        schema = target.schema if target else (parsed.database or item.schema)
        table = target.table if target else None
        ddl = DdlChange(
            kind=parsed.kind,
            source=self.source,
            ts=ts,
            schema=schema,
            table=table,
            statement=item.statement,
            table_schema=None,
            position=item.position,
            txn=ref,
            sql_mode=item.sql_mode,
            timestamp_us=item.timestamp_us,
            time_zone=item.time_zone,
        )
        if item.after is not None and item.after.known:
            # The schema tracker applied the statement: its after-schema is exact.
            if table is not None and self._pending:
                self._resolve_ddls(schema, table, None, fallback=False)
            self.records.ddl(self.batch, replace(ddl, table_schema=item.after.table), item)
            return
        if table is None or parsed.kind is DdlKind.DROP_TABLE:
            self.records.ddl(self.batch, ddl, item)
            return
        slots = self.records.ddl_slots(self.batch, ddl)
        self._pending.setdefault((schema, table), []).append(_PendingDdl(item, ddl, slots))

    def _fill(self, pending: _PendingDdl, after: TableSchema | None) -> None:
        ddl = replace(pending.ddl, table_schema=after)
        self.records.fill(self.batch, pending.slots, ddl, pending.item)

    def _resolve_ddls(
        self, schema: str, table: str, after: TableSchema | None, fallback: bool = True
    ) -> None:
        waiting = self._pending.pop((schema, table), None)
        if not waiting:
            return
        if not fallback:
            # A tracked DDL of the table follows: the schema in between is not knowable.
            for pending in waiting:
                self._fill(pending, None)
            return
        *earlier, last = waiting
        for pending in earlier:
            # Another DDL of the table followed before any row: the schema between the two
            # never shows in the binlog, and the live server may already be past both.
            # No schema is honest; a wrong one would mislead every consumer.
            self._fill(pending, None)
        self._fill(last, after if after is not None else self._ddl_schema(last.item))

    # ---- watermarks -------------------------------------------------------------------------

    def add_resolved(self) -> int:
        """A `Resolved` at the clock's last tick to every partition of every topic written
        (below an open stream: its transaction is not whole yet)."""
        ts = self.resume_ts
        record = Resolved(source=self.source, ts=ts)
        self.records.watermark(self.batch, record)
        return ts

    def add_heartbeat(
        self, reader_id: str, position: BinlogPosition, lag_ms: int, now: float
    ) -> int:
        """A `Heartbeat` with a fresh tick to every partition of every topic written (a
        `Resolved` while a stream is open: no watermark may pass it)."""
        if self.open_stream is not None:
            return self.add_resolved()
        ts = self.clock.next(int(now * 1000))
        record = Heartbeat(
            source=self.source, ts=ts, reader_id=reader_id, position=position, lag_ms=lag_ms
        )
        self.records.watermark(self.batch, record)
        return ts

    # ---- flushing ---------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Whether the open batch should be committed now."""
        batch = self.batch
        if batch.started is None:
            return False
        stats = batch.stats
        if stats.events:
            full = stats.events >= self.policy.rows or stats.bytes >= self.policy.bytes
            if self._pending and not full and now - self._pending_since < DDL_SCHEMA_WAIT_S:
                # A DDL's schema comes from the next table map of its table; flushing before
                # it arrives would fall back to the live server, which may be further ahead.
                return False
            return full or now - batch.started >= self.policy.interval_s
        return now - batch.started >= self.policy.idle_interval_s

    def ready(self) -> int:
        """How many records, from the first, are final: all but those from the first slot of a
        DDL still waiting for its schema (`_fill` writes them later)."""
        end = len(self.batch.records)
        if not self._pending:
            return end
        firsts = (p.slots[0][0] for waiting in self._pending.values() for p in waiting if p.slots)
        return min(firsts, default=end)

    def take(self) -> Batch:
        """The open batch, replaced by an empty one."""
        for schema, table in list(self._pending):
            self._resolve_ddls(schema, table, None)
        batch, self.batch = self.batch, Batch()
        return batch
