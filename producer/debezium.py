"""The batcher of the ``debezium`` encoding: the same transactions, clock, checkpoints and Kafka
transactions as `rowbus.producer.batch.Batcher`, with the data records rendered as Debezium's
MySQL connector writes them (`rowbus.protocol.debezium`).

What goes where (each record in the reader's Kafka transaction with its checkpoint, so exactly
once into Kafka as with the native encodings):

- a row: to ``<prefix>.<db>.<table>`` (or rowbus's topic template), keyed by the JSON of its
  primary key and partitioned as Kafka's default partitioner places that key (so per-key order
  holds as with any Debezium topic); a delete is followed by a tombstone (same key, no value);
  an update that changes the key is a delete, its tombstone, then a create (as Debezium does);
- a watermark (`Resolved`, `Heartbeat`): one record of ``__debezium-heartbeat.<prefix>``;
- with transaction metadata: ``BEGIN`` before a transaction's first row and ``END`` (the
  event count per table) after its last, on ``<prefix>.transaction``, and the ``transaction``
  block in each row;
- a DDL: one record of the schema-change topic ``<prefix>``;
- snapshot markers: nothing (Debezium has no such record; snapshot rows are ``op: r``).

The schemas topic is still written, in protobuf, as are the checkpoints: the reader resumes
from them, and they cost a record per table version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rowbus.producer import fastrows
from rowbus.producer.assembler import Change, DdlItem, RowItem, Transaction
from rowbus.producer.batch import Batch, Batcher, _PendingDdl
from rowbus.producer.fragments import OpenStream
from rowbus.protocol.codec import DEBEZIUM_ENCODING, ENCODING_HEADER
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.debezium import DebeziumRenderer
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    Heartbeat,
    Op,
    ReaderCheckpoint,
    Record,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.partition import java_partition
from rowbus.protocol.topics import schema_key

_partition = fastrows.partition if fastrows.AVAILABLE else java_partition
"""Kafka's default partitioner on the key bytes (natively when the extension is built)."""
_HEADERS: list[tuple[str, bytes | None]] = [(ENCODING_HEADER, DEBEZIUM_ENCODING.encode())]
"""On every record: rowbus's own consumers refuse it in one line (Debezium's ignore it)."""


_LAST_IN_TABLE = b',"snapshot":"last_in_data_collection",'


class _SnapshotMarks:
    """Debezium's ``source.snapshot`` of snapshot rows: ``first`` for the first row this
    reader snapshots, ``first_in_data_collection`` for each table's first,
    ``last_in_data_collection`` for its last (set when the table's `SnapshotEnd` comes, if
    that row is still in the open batch and not yet produced), ``true`` for the others."""

    def __init__(self) -> None:
        self._starting: set[tuple[str, str]] = set()
        self._any = False
        self._last: dict[tuple[str, str], int] = {}
        """Each table's last snapshot row: its index in the open batch."""

    def begin(self, table: tuple[str, str]) -> None:
        self._starting.add(table)

    def row(self, table: tuple[str, str], index: int) -> str:
        """The mark of a snapshot row of `table`, the batch's `index`-th record."""
        if len(self._last) >= 4096:
            self._last.clear()
        self._last[table] = index
        if table not in self._starting:
            return "true"
        self._starting.discard(table)
        first, self._any = not self._any, True
        return "first" if first else "first_in_data_collection"

    def end(self, table: tuple[str, str], batch: Batch) -> None:
        index = self._last.pop(table, None)
        if index is None or not batch.sent <= index < len(batch.records):
            return  # produced already (or in an earlier batch): it stays as it is
        topic, partition, key, value, headers = batch.records[index]
        if value is None:
            return
        # The source block follows the images: its mark is the last such text of the value
        # (a string value holding it is escaped, so cannot match). A table's one row is
        # last_in_data_collection, unless it is the snapshot's first (Debezium's order).
        for mark in (b',"snapshot":"true",', b',"snapshot":"first_in_data_collection",'):
            at = value.rfind(mark)
            if at >= 0:
                break
        else:
            return
        marked = value[:at] + _LAST_IN_TABLE + value[at + len(mark) :]
        batch.records[index] = (topic, partition, key, marked, headers)
        batch.stats.bytes += len(marked) - len(value)


@dataclass
class _OpenTxn:
    """The upstream transaction whose rows are being rendered (transaction metadata)."""

    id: str
    total: int = 0
    per_table: dict[str, int] = field(default_factory=dict)
    resumed: bool = False
    """Begun before a reader restart (its BEGIN and first fragments published then)."""

    def count(self, collection: str) -> tuple[int, int]:
        """One more event of `collection` (``db.table``): its (total order, order in its
        table)."""
        self.total += 1
        self.per_table[collection] = self.per_table.get(collection, 0) + 1
        return self.total, self.per_table[collection]


class DebeziumBatcher(Batcher):
    """A `Batcher` whose data records are Debezium's. `debezium_topics`: name the data topics
    ``<prefix>.<db>.<table>`` (False: by the reader's topic template); `wall`: the clock of
    the records' ``ts_ms`` (when rowbus processed the change, as Debezium's)."""

    def __init__(
        self,
        *args: Any,
        renderer: DebeziumRenderer,
        debezium_topics: bool = True,
        wall: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._dbz = renderer
        self._dbz_topics = debezium_topics
        self._wall = wall
        self._open_txn: _OpenTxn | None = None
        self._commit_ms: int | None = None
        """The commit time of the transaction being added (None: a fragment or snapshot)."""
        self._snapshot = _SnapshotMarks()
        self._resumed = False
        """A restarted reader goes on with a fragmented transaction (`resume_stream`)."""
        self._row_in_event: tuple[str, int, int, int] = ("", -1, 0, 0)
        """(file, offset, n, id of the item): the n-th row of the binlog rows event at
        file:offset, Debezium's ``source.row`` (the two halves of a key-changing update are
        one row)."""

    # ---- topics -----------------------------------------------------------------------------

    def _named(self, name: str) -> int:
        n = self.topics.get(name)
        if n is None:
            n = self.topics[name] = self._partitions_of(name)
        return n

    def topic_for(self, schema: str, table: str | None) -> tuple[str, Any]:
        if not self._dbz_topics or table is None:
            return super().topic_for(schema, table)
        key = (schema, table)
        found = self._topic_cache.get(key)
        if found is None:
            name = self._dbz.options.table_topic(schema, table)
            found = self._topic_cache[key] = (name, self._partitioner_for(self._named(name)))
        return found

    def _append(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        n = self._named(topic)
        partition = 0 if key is None else _partition(key, n)
        self.batch.records.append((topic, partition, key, value, _HEADERS))  # type: ignore[arg-type]
        self.batch.stats.bytes += len(value or b"") + len(key or b"")

    # ---- rows -------------------------------------------------------------------------------

    def add(self, txn: Transaction, now: float, defining: Any = ()) -> None:
        # source.ts_ms is the commit time (the binlog's seconds), as Debezium's: the hybrid
        # clock's physical part can be ahead of it (a heartbeat's wall clock, a catch-up).
        self._commit_ms = txn.commit_time * 1000
        self._resume_txn(txn.id)
        try:
            super().add(txn, now, defining)
        finally:
            self._commit_ms = None
        if self.open_stream is None:
            self._end_txn()

    def stream(
        self,
        txn_id: str,
        gtid: str | None,
        changes: list[Change],
        now: float,
        defining: Any = (),
    ) -> None:
        self._resume_txn(txn_id)
        super().stream(txn_id, gtid, changes, now, defining)

    def resume_stream(self, fragment: ReaderCheckpoint) -> None:
        super().resume_stream(fragment)
        self._resumed = True

    def _emit_stream(
        self,
        stream: OpenStream,
        planned: list[tuple[RowItem | DdlItem, Op, object, object]],
        count: int | None,
    ) -> None:
        txn = self._open_txn
        if txn is not None and txn.resumed:
            # The rows published before the restart, which it reads again without publishing:
            # counted, so the orders go on and END counts the whole transaction.
            for item, *_ in planned:
                if isinstance(item, RowItem) and stream.published(item.position):
                    txn.count(f"{item.table.schema}.{item.table.table}")
        super()._emit_stream(stream, planned, count)

    def _resume_txn(self, txn_id: str) -> None:
        """After a restart inside a fragmented transaction: its BEGIN went out before the
        restart, so it is open again without another (one BEGIN and one END per
        transaction)."""
        if self._resumed and self._dbz.options.transaction_metadata:
            self._end_txn()
            self._open_txn = _OpenTxn(txn_id, resumed=True)
        self._resumed = False

    def _native_row(self, *args: Any) -> bool:
        return False

    def _lean_reads(self, table: TableSchema, position: BinlogPosition) -> None:
        return None  # every snapshot row is rendered by `_add_row` (the lean path is protobuf)

    def _add_row(
        self, item: RowItem, op: Op, before: object, after: object, ts: int, ref: TxnRef
    ) -> None:
        table = item.table
        if self._pending:
            self._resolve_ddls(table.schema, table.table, table)
        sid = table.schema_id
        if sid not in self.published_schemas:
            record = SchemaRecord.of(table, self.source, ts)
            super()._emit(self._schemas_topic, None, schema_key(sid), record)
            self.published_schemas.add(sid)
        row = self._row(item, op, before, after, ts, ref)
        pos = row.position
        at, offset, n, last = self._row_in_event
        if (at, offset) != (pos.file, pos.offset):
            n = 0
        elif last != id(item):
            n += 1
        self._row_in_event = (pos.file, pos.offset, n, id(item))
        self._render(row, table, item.start, n)

    def _render(self, row: RowChange, table: TableSchema, start: int | None, n: int) -> None:
        dbz = self._dbz
        topic, _ = self.topic_for(table.schema, table.table)
        order = None
        if dbz.options.transaction_metadata:
            order = self._count(row)
        key = dbz.key(row, table)
        ts_ms = int(self._wall() * 1000)
        snapshot = "false"
        if row.op is Op.READ:
            snapshot = self._snapshot.row((table.schema, table.table), len(self.batch.records))
        value = dbz.value(row, table, ts_ms, order, snapshot, n, start, self._commit_ms)
        self._append(topic, key, value)
        if row.op is Op.DELETE and key is not None:
            self._append(topic, key, None)  # the tombstone, for compacted topics
        self.batch.stats.rows += 1

    def _count(self, row: RowChange) -> tuple[int, int]:
        """The row's (order in its transaction, order among its table's rows in it), after
        the transaction's BEGIN when it is its first."""
        txn = self._open_txn
        if txn is None or txn.id != row.txn.id:
            self._end_txn()
            txn = self._open_txn = _OpenTxn(row.txn.id)
            key, value = self._dbz.transaction("BEGIN", txn.id, int(self._wall() * 1000))
            self._append(self._dbz.options.transaction_topic, key, value)
        return txn.count(f"{row.schema}.{row.table}")

    def _end_txn(self) -> None:
        txn, self._open_txn = self._open_txn, None
        if txn is None:
            return
        key, value = self._dbz.transaction(
            "END", txn.id, int(self._wall() * 1000), dict(txn.per_table)
        )
        self._append(self._dbz.options.transaction_topic, key, value)

    # ---- DDL, markers, watermarks -----------------------------------------------------------

    def _add_ddl(self, item: DdlItem, ts: int, ref: TxnRef) -> None:
        parsed = item.parsed
        target = parsed.table
        ddl = DdlChange(
            kind=parsed.kind,
            source=self.source,
            ts=ts,
            schema=target.schema if target else (parsed.database or item.schema),
            table=target.table if target else None,
            statement=item.statement,
            table_schema=None,
            position=item.position,
            txn=ref,
        )
        topic = self._dbz.options.schema_change_topic
        self._named(topic)
        if ddl.table is None or parsed.kind is DdlKind.DROP_TABLE:
            self._add_schema_change(ddl, item.start)
            return
        self.topic_for(ddl.schema, ddl.table)  # created before its first row
        if item.after is not None and item.after.known:
            # The schema tracker applied the statement: its after-schema is exact.
            if self._pending:
                self._resolve_ddls(ddl.schema, ddl.table, None, fallback=False)
            self._add_schema_change(replace(ddl, table_schema=item.after.table), item.start)
            return
        # As the native batcher: the table after it is the next table map of the table (or
        # the live server's when none comes); its record waits in the batch for it (`_fill`).
        slot = (len(self.batch.records), topic, 0, None)
        self.batch.records.append((topic, 0, None, b"", []))
        self._pending.setdefault((ddl.schema, ddl.table), []).append(_PendingDdl(item, ddl, [slot]))

    def _add_schema_change(self, ddl: DdlChange, start: int | None) -> None:
        key, value = self._dbz.schema_change(ddl, start)
        topic = self._dbz.options.schema_change_topic
        self.batch.records.append((topic, 0, key, value, _HEADERS))  # type: ignore[arg-type]
        self.batch.stats.bytes += len(value)

    def _fill(self, pending: _PendingDdl, after: TableSchema | None) -> None:
        key, value = self._dbz.schema_change(
            replace(pending.ddl, table_schema=after), pending.item.start
        )
        for index, topic, partition, _ in pending.slots:
            self.batch.records[index] = (topic, partition, key, value, _HEADERS)  # type: ignore[assignment]
            self.batch.stats.bytes += len(value)

    def _emit(self, topic: str, partition: int | None, key: bytes | None, record: Record) -> None:
        # Debezium has no snapshot markers: they only mark the first and last rows of a table.
        if isinstance(record, SnapshotBegin):
            self._snapshot.begin((record.schema, record.table))
        elif isinstance(record, SnapshotEnd):
            self._snapshot.end((record.schema, record.table), self.batch)
        else:
            super()._emit(topic, partition, key, record)

    def _broadcast(self, record: Resolved | Heartbeat) -> None:
        # ts_ms is the watermark's physical clock: every change the source committed up to
        # that millisecond is published. Nothing is read yet at a clock of 0: no heartbeat.
        if record.ts >> 16 == 0:
            return
        key, value = self._dbz.heartbeat(record.ts >> 16)
        self._append(self._dbz.options.heartbeat_topic, key, value)


__all__ = ["DebeziumBatcher"]
