"""The records of the ``debezium`` encoding (`DebeziumRecords`, the `rowbus.producer.records`
seam): the batcher's transactions, clock, checkpoints and Kafka transactions are the same as with
the native encodings; the data records are Debezium's MySQL connector's
(`rowbus.protocol.debezium`).

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
from dataclasses import dataclass, field

from rowbus.producer import fastrows
from rowbus.producer.assembler import DdlItem, RowItem
from rowbus.producer.records import (
    Batch,
    Image,
    NativeRecords,
    Records,
    Slot,
    Topics,
    row_change,
    watched_columns,
)
from rowbus.protocol.codec import DEBEZIUM_ENCODING, ENCODING_HEADER, Encoding
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.debezium import DebeziumRenderer
from rowbus.protocol.events import (
    DdlChange,
    Heartbeat,
    Op,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    SnapshotMarker,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.partition import Partitioner, java_partition

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


class DebeziumRecords(Records):
    """Debezium's records of the batcher's events. `debezium_topics`: name the data topics
    ``<prefix>.<db>.<table>`` (False: by the reader's topic template); `wall`: the clock of
    the records' ``ts_ms`` (when rowbus processed the change, as Debezium's). Schema records
    stay rowbus's, in protobuf on `schemas_topic` (the reader reads them back)."""

    def __init__(
        self,
        topics: Topics,
        schemas_topic: str,
        renderer: DebeziumRenderer,
        debezium_topics: bool = True,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(topics)
        self._schemas = NativeRecords(topics, schemas_topic, Encoding.PROTOBUF)
        self.published_schemas = self._schemas.published_schemas
        self.source = topics.source
        self._dbz = renderer
        self._dbz_topics = debezium_topics
        self._wall = wall
        self._topic_cache: dict[tuple[str, str], tuple[str, Partitioner]] = {}
        self._watched: dict[int, tuple[TableSchema, tuple[int, ...]]] = {}
        self._open_txn: _OpenTxn | None = None
        self._commit_ms: int | None = None
        """The commit time of the transaction being added (None: a fragment or snapshot)."""
        self._snapshot = _SnapshotMarks()
        self._resumed = False
        """A restarted reader goes on with a fragmented transaction (`resumed`)."""
        self._row_in_event: tuple[str, int, int, int] = ("", -1, 0, 0)
        """(file, offset, n, id of the item): the n-th row of the binlog rows event at
        file:offset, Debezium's ``source.row`` (the two halves of a key-changing update are
        one row)."""

    # ---- topics -----------------------------------------------------------------------------

    def _topic(self, schema: str, table: str | None) -> tuple[str, Partitioner]:
        if not self._dbz_topics or table is None:
            return self.topics.for_table(schema, table)
        key = (schema, table)
        found = self._topic_cache.get(key)
        if found is None:
            name = self._dbz.options.table_topic(schema, table)
            partitioner = self.topics.partitioner_for(self.topics.named(name))
            found = self._topic_cache[key] = (name, partitioner)
        return found

    def _append(self, batch: Batch, topic: str, key: bytes | None, value: bytes | None) -> None:
        n = self.topics.named(topic)
        partition = 0 if key is None else _partition(key, n)
        batch.records.append((topic, partition, key, value, _HEADERS))  # type: ignore[arg-type]
        batch.stats.bytes += len(value or b"") + len(key or b"")

    # ---- transactions -----------------------------------------------------------------------

    def opened(self, batch: Batch, txn_id: str, commit_time: int | None) -> None:
        # source.ts_ms is the commit time (the binlog's seconds), as Debezium's: the hybrid
        # clock's physical part can be ahead of it (a heartbeat's wall clock, a catch-up).
        self._commit_ms = None if commit_time is None else commit_time * 1000
        if self._resumed and self._dbz.options.transaction_metadata:
            # After a restart inside a fragmented transaction: its BEGIN went out before the
            # restart, so it is open again without another (one BEGIN, one END).
            self._end_txn(batch)
            self._open_txn = _OpenTxn(txn_id, resumed=True)
        self._resumed = False

    def closed(self, batch: Batch) -> None:
        self._commit_ms = None
        self._end_txn(batch)

    def resumed(self) -> None:
        self._resumed = True

    def replayed(self, item: RowItem | DdlItem) -> None:
        txn = self._open_txn
        if txn is not None and txn.resumed and isinstance(item, RowItem):
            # A row published before the restart, read again without publishing: counted,
            # so the orders go on and END counts the whole transaction.
            txn.count(f"{item.table.schema}.{item.table.table}")

    # ---- rows -------------------------------------------------------------------------------

    def moves(self, item: RowItem) -> bool:
        table = item.table
        found = self._watched.get(id(table))
        if found is None or found[0] is not table:
            if len(self._watched) >= 4096:
                self._watched.clear()
            _, partitioner = self._topic(table.schema, table.table)
            found = self._watched[id(table)] = (table, watched_columns(table, partitioner))
        before, after = item.before, item.after
        assert before is not None
        assert after is not None
        return any(before[i] != after[i] for i in found[1])

    def schema(self, batch: Batch, table: TableSchema, ts: int) -> None:
        self._schemas.schema(batch, table, ts)

    def row(
        self, batch: Batch, item: RowItem, op: Op, before: Image, after: Image, ts: int, ref: TxnRef
    ) -> None:
        table = item.table
        self._schemas.schema(batch, table, ts)
        row = row_change(self.source, item, op, before, after, ts, ref)
        pos = row.position
        at, offset, n, last = self._row_in_event
        if (at, offset) != (pos.file, pos.offset):
            n = 0
        elif last != id(item):
            n += 1
        self._row_in_event = (pos.file, pos.offset, n, id(item))
        self._render(batch, row, table, item.start, n)

    def _render(
        self, batch: Batch, row: RowChange, table: TableSchema, start: int | None, n: int
    ) -> None:
        dbz = self._dbz
        topic, _ = self._topic(table.schema, table.table)
        order = None
        if dbz.options.transaction_metadata:
            order = self._count(batch, row)
        key = dbz.key(row, table)
        ts_ms = int(self._wall() * 1000)
        snapshot = "false"
        if row.op is Op.READ:
            snapshot = self._snapshot.row((table.schema, table.table), len(batch.records))
        value = dbz.value(row, table, ts_ms, order, snapshot, n, start, self._commit_ms)
        self._append(batch, topic, key, value)
        if row.op is Op.DELETE and key is not None:
            self._append(batch, topic, key, None)  # the tombstone, for compacted topics
        batch.stats.rows += 1

    def _count(self, batch: Batch, row: RowChange) -> tuple[int, int]:
        """The row's (order in its transaction, order among its table's rows in it), after
        the transaction's BEGIN when it is its first."""
        txn = self._open_txn
        if txn is None or txn.id != row.txn.id:
            self._end_txn(batch)
            txn = self._open_txn = _OpenTxn(row.txn.id)
            key, value = self._dbz.transaction("BEGIN", txn.id, int(self._wall() * 1000))
            self._append(batch, self._dbz.options.transaction_topic, key, value)
        return txn.count(f"{row.schema}.{row.table}")

    def _end_txn(self, batch: Batch) -> None:
        """The open transaction's END, if one is open."""
        txn, self._open_txn = self._open_txn, None
        if txn is None:
            return
        key, value = self._dbz.transaction(
            "END", txn.id, int(self._wall() * 1000), dict(txn.per_table)
        )
        self._append(batch, self._dbz.options.transaction_topic, key, value)

    # ---- DDL, markers, watermarks -----------------------------------------------------------

    def ddl(self, batch: Batch, ddl: DdlChange, item: DdlItem) -> None:
        topic = self._dbz.options.schema_change_topic
        self.topics.named(topic)
        if ddl.table is not None and ddl.kind is not DdlKind.DROP_TABLE:
            self._topic(ddl.schema, ddl.table)  # created before its first row
        key, value = self._dbz.schema_change(ddl, item.start)
        batch.records.append((topic, 0, key, value, _HEADERS))  # type: ignore[arg-type]
        batch.stats.bytes += len(value)

    def ddl_slots(self, batch: Batch, ddl: DdlChange) -> list[Slot]:
        topic = self._dbz.options.schema_change_topic
        self.topics.named(topic)
        self._topic(ddl.schema, ddl.table)  # created before its first row
        slot = (len(batch.records), topic, 0, None)
        batch.records.append((topic, 0, None, b"", []))
        return [slot]

    def fill(self, batch: Batch, slots: list[Slot], ddl: DdlChange, item: DdlItem) -> None:
        key, value = self._dbz.schema_change(ddl, item.start)
        for index, topic, partition, _ in slots:
            batch.records[index] = (topic, partition, key, value, _HEADERS)  # type: ignore[assignment]
            batch.stats.bytes += len(value)

    def marker(self, batch: Batch, marker: SnapshotMarker) -> None:
        # Debezium has no snapshot markers: they only mark the first and last rows of a table.
        self._topic(marker.schema, marker.table)
        if isinstance(marker, SnapshotBegin):
            self._snapshot.begin((marker.schema, marker.table))
        elif isinstance(marker, SnapshotEnd):
            self._snapshot.end((marker.schema, marker.table), batch)

    def watermark(self, batch: Batch, record: Resolved | Heartbeat) -> None:
        # ts_ms is the watermark's physical clock: every change the source committed up to
        # that millisecond is published. Nothing is read yet at a clock of 0: no heartbeat.
        if record.ts >> 16 == 0:
            return
        key, value = self._dbz.heartbeat(record.ts >> 16)
        self._append(batch, self._dbz.options.heartbeat_topic, key, value)


__all__ = ["DebeziumRecords"]
