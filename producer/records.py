"""From the batcher's events to records (pure): the seam between `rowbus.producer.batch.Batcher`,
which keeps the transactions, the clock, fragments and DDLs waiting for their schema, and an
encoding, which decides what each event becomes on Kafka.

`Records` is that seam: the batcher calls it for each row, DDL, marker, watermark and schema
record, with the `Batch` to append to, and tells it where transactions open and close. Two
implement it: `NativeRecords`, rowbus's protocol (protobuf, Avro, JSON; PROTOCOL.md), with its
native fast paths; and `rowbus.producer.debezium.DebeziumRecords`, Debezium's records.
`Topics` names the data topics and knows their partition counts, for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from rowbus.producer import fastrows
from rowbus.producer.assembler import DdlItem, RowItem
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    Heartbeat,
    Op,
    Record,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotMarker,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.partition import DispatchRule, Partitioner, encode_key, java_partition
from rowbus.protocol.topics import data_topic, schema_key
from rowbus.protocol.values import Value

OutRecord = fastrows.OutRecord
Slot = tuple[int, str, int | None, bytes | None]
"""A record of the batch whose value waits for a DDL's schema: (index, topic, partition, key)."""
Image = tuple[Value, ...] | None


@dataclass
class BatchStats:
    transactions: int = 0
    events: int = 0
    rows: int = 0
    bytes: int = 0


@dataclass
class Batch:
    """The records of the next Kafka transaction, and the position it reaches."""

    records: list[OutRecord] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    end: BinlogPosition | None = None
    started: float | None = None
    last_commit_time: int = 0
    sent: int = 0
    """How many of `records` (from the first) the reader has produced already, into the Kafka
    transaction this batch commits (`Batcher.ready`)."""


class Topics:
    """The data topics of one source: their names (`template`) and partition counts
    (`partitions_of` creates a topic when needed), and each count's partitioner."""

    def __init__(
        self,
        source: str,
        template: str,
        partitions_of: Callable[[str], int],
        partitioner_for: Callable[[int], Partitioner],
    ) -> None:
        self.source = source
        self._template = template
        self._partitions_of = partitions_of
        self.partitioner_for = partitioner_for
        self.written: dict[str, int] = {}
        """Every topic written, with its partition count (watermarks go to each partition)."""
        self._cache: dict[tuple[str, str], tuple[str, Partitioner]] = {}

    def named(self, name: str) -> int:
        """The partition count of the topic `name`, created if needed."""
        n = self.written.get(name)
        if n is None:
            n = self.written[name] = self._partitions_of(name)
        return n

    def for_table(self, schema: str, table: str | None) -> tuple[str, Partitioner]:
        """The data topic of `schema`.`table` by the template, and its partitioner."""
        key = (schema, table or "")
        found = self._cache.get(key)
        if found is None:
            name = data_topic(self._template, self.source, schema, table or "_")
            found = self._cache[key] = (name, self.partitioner_for(self.named(name)))
        return found


def watched_columns(table: TableSchema, partitioner: Partitioner) -> tuple[int, ...]:
    """The columns whose change moves a row to another key or partition (PROTOCOL.md §6)."""
    dispatch = partitioner.dispatch_for(table.schema, table.table)
    watched = set(table.pk_indexes)
    if dispatch.rule is DispatchRule.BY_COLUMNS:
        watched.update(table.index_of(c) for c in dispatch.columns if c in table.column_names)
    return tuple(sorted(watched))


def row_change(
    source: str, item: RowItem, op: Op, before: Image, after: Image, ts: int, ref: TxnRef
) -> RowChange:
    """The `RowChange` of one planned row (a key-moving update is two: its delete, its insert)."""
    table = item.table
    return RowChange(
        source=source,
        ts=ts,
        op=op,
        schema=table.schema,
        table=table.table,
        schema_id=table.schema_id,
        primary_key=table.primary_key,
        before=before,
        after=after,
        txn=ref,
        position=item.position,
    )


class Records(ABC):
    """What the batcher's events become: each method appends to `batch` (the open one).

    Rows come planned: an update that `moves` its row is a delete and an insert. A DDL's
    schema after it is given (`ddl`) or not known yet: then `ddl_slots` holds its records'
    places and `fill` writes them once it is. The hooks (`opened`, `closed`, `resumed`,
    `replayed`) tell where upstream transactions begin and end, for an encoding that
    marks them."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics
        self.published_schemas: set[int] = set()
        """The schema ids whose `SchemaRecord` this reader wrote."""

    @abstractmethod
    def moves(self, item: RowItem) -> bool:
        """Whether an update changes its row's key or partition (published as two events)."""

    def fast_row(
        self,
        batch: Batch,
        item: RowItem,
        op: Op,
        before: Image,
        after: Image,
        ts: int,
        txn_id: str,
        index: int,
        count: int | None,
    ) -> bool:
        """`row` without a `TxnRef` built, for the common row of a transaction with no DDL
        waiting; False when it does not apply (the batcher then calls `row`)."""
        return False

    @abstractmethod
    def row(
        self, batch: Batch, item: RowItem, op: Op, before: Image, after: Image, ts: int, ref: TxnRef
    ) -> None:
        """One planned row, after its table's schema record when it is its first."""

    def snapshot_rows(
        self,
        batch: Batch,
        table: TableSchema,
        rows: list[tuple[Value, ...]],
        ts: int,
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
    ) -> bool:
        """Rows 1.. of a snapshot chunk (row 0 went by `row`) in one go; False when it does
        not apply (the batcher then calls `row` for each)."""
        return False

    @abstractmethod
    def ddl(self, batch: Batch, ddl: DdlChange, item: DdlItem) -> None:
        """A DDL whose schema after it is known (or of no table)."""

    @abstractmethod
    def ddl_slots(self, batch: Batch, ddl: DdlChange) -> list[Slot]:
        """The places of a DDL's records, written by `fill` when its schema is known."""

    @abstractmethod
    def fill(self, batch: Batch, slots: list[Slot], ddl: DdlChange, item: DdlItem) -> None:
        """A waiting DDL's records, now with its schema after it (or None: not knowable)."""

    @abstractmethod
    def marker(self, batch: Batch, marker: SnapshotMarker) -> None:
        """A snapshot marker (PROTOCOL.md §9.7)."""

    @abstractmethod
    def watermark(self, batch: Batch, record: Resolved | Heartbeat) -> None:
        """A watermark, to every partition of every topic written."""

    @abstractmethod
    def schema(self, batch: Batch, table: TableSchema, ts: int) -> None:
        """`table`'s schema record, if this reader has not written it yet."""

    def opened(self, batch: Batch, txn_id: str, commit_time: int | None) -> None:
        """A transaction's events (or a fragment's: `commit_time` None) are coming."""
        return  # nothing to mark in rowbus's protocol

    def closed(self, batch: Batch) -> None:
        """The transaction whose events came last is whole."""
        return  # nothing to mark in rowbus's protocol

    def resumed(self) -> None:
        """A restarted reader goes on with a transaction it was publishing in fragments."""
        return  # nothing to mark in rowbus's protocol

    def replayed(self, item: RowItem | DdlItem) -> None:
        """An event of that transaction published before the restart (read, not published)."""
        return  # nothing to mark in rowbus's protocol


@dataclass(frozen=True, slots=True)
class _Lane:
    """What every row of one table (one `TableSchema` object) shares on its way to a record:
    computed at the table's first row, not at each."""

    table: TableSchema
    topic: str
    partitioner: Partitioner
    by_key: bool
    """Keyed and partitioned by primary key (the default dispatch of a keyed table)."""
    watched: tuple[int, ...]
    """The columns whose change moves a row to another key or partition (`moves`)."""
    key: Callable[[tuple[Value, ...]], bytes | None] | None
    """`fastrows.int_key` of the table's rows, when they are encoded natively (else None)."""
    prefix: bytes = b""
    at: int = -1
    """The image position of a one-integer-column key (-1: another key): such rows are built
    by `fastrows.record_builder` in one native call."""


_MAX_LANES = 4_096
INSERT, UPDATE, DELETE = Op.INSERT, Op.UPDATE, Op.DELETE
"""`fast_row` finds `fastrows.OP_NUMBERS` by identity (an enum's hash is a Python call)."""


class NativeRecords(Records):
    """rowbus's own records in `encoding`; rows keyed by primary key natively when the
    encoding is protobuf and the extension is built (`rowbus.producer.fastrows`)."""

    def __init__(self, topics: Topics, schemas_topic: str, encoding: Encoding) -> None:
        super().__init__(topics)
        self.source = topics.source
        self._schemas_topic = schemas_topic
        self._encoding = encoding
        self.native = encoding is Encoding.PROTOBUF and fastrows.AVAILABLE
        """Rows keyed by primary key are encoded natively (`fastrows.change_value`)."""
        self._record = fastrows.record_builder() if self.native else None
        self._key_prefixes: dict[tuple[str, str], bytes] = {}
        self._lanes: dict[int, _Lane] = {}
        """By `id` of the table schema (the lane holds the object, so the id stays its own)."""

    def _lane(self, table: TableSchema) -> _Lane:
        lane = self._lanes.get(id(table))
        if lane is not None and lane.table is table:
            return lane
        topic, partitioner = self.topics.for_table(table.schema, table.table)
        dispatch = partitioner.dispatch_for(table.schema, table.table)
        by_key = bool(table.primary_key) and dispatch.rule is DispatchRule.BY_PRIMARY_KEY
        key, prefix, at = None, b"", -1
        if by_key and self.native:
            prefix = self._key_prefix(table)
            key = fastrows.key_maker(prefix, table.pk_indexes)
            if len(table.pk_indexes) == 1 and self._record is not None:
                at = table.pk_indexes[0]
        if len(self._lanes) >= _MAX_LANES:
            self._lanes.clear()  # tables come and go with DDL: bounded, rebuilt when needed
        watched = watched_columns(table, partitioner)
        lane = self._lanes[id(table)] = _Lane(
            table, topic, partitioner, by_key, watched, key, prefix, at
        )
        return lane

    def _key_prefix(self, table: TableSchema) -> bytes:
        names = (table.schema, table.table)
        prefix = self._key_prefixes.get(names)
        if prefix is None:
            prefix = self._key_prefixes[names] = fastrows.key_prefix(*names)
        return prefix

    def _emit(
        self, batch: Batch, topic: str, partition: int | None, key: bytes | None, record: Record
    ) -> None:
        value, headers = encode(record, self._encoding)
        batch.records.append((topic, partition, key, value, headers))
        batch.stats.bytes += len(value)

    def moves(self, item: RowItem) -> bool:
        before, after = item.before, item.after
        assert before is not None
        assert after is not None
        return any(before[i] != after[i] for i in self._lane(item.table).watched)

    def schema(self, batch: Batch, table: TableSchema, ts: int) -> None:
        sid = table.schema_id
        if sid not in self.published_schemas:
            record = SchemaRecord.of(table, self.source, ts)
            self._emit(batch, self._schemas_topic, None, schema_key(sid), record)
            self.published_schemas.add(sid)

    def fast_row(
        self,
        batch: Batch,
        item: RowItem,
        op: Op,
        before: Image,
        after: Image,
        ts: int,
        txn_id: str,
        index: int,
        count: int | None,
    ) -> bool:
        """The value from the image, key and partition computed once, nothing built per
        value, for a row whose schema is published and which is keyed by primary key."""
        table = item.table
        if table.schema_id not in self.published_schemas:
            return False
        lane = self._lane(table)
        if lane.key is None:
            return False
        position = item.position
        number = 1 if op is INSERT else 2 if op is UPDATE else 3 if op is DELETE else 0
        if lane.at >= 0 and number and count is not None and not position.upstream:
            assert self._record is not None
            try:
                record = self._record(
                    lane.topic, fastrows.ROW_HEADER_LIST, lane.prefix, lane.at,
                    lane.partitioner.num_partitions, self.source, ts, number,
                    table.schema, table.table, table.schema_id, table.primary_key, before,
                    after, txn_id, index, count, position.file, position.offset, position.gtid,
                )  # fmt: skip
            except (ValueError, TypeError, OverflowError):
                record = None  # the general path says what is wrong
            if record is not None:
                batch.records.append(record)
                stats = batch.stats
                stats.bytes += len(record[3])
                stats.rows += 1
                return True
        value = fastrows.change_value(
            self.source, ts, op, table.schema, table.table, table.schema_id, table.primary_key,
            before, after, txn_id, index, count, item.position,
        )  # fmt: skip
        if value is None:
            return False
        image = after if after is not None else before
        assert image is not None
        key = lane.key(image) or encode_key(
            table.schema, table.table, [image[i] for i in table.pk_indexes]
        )
        partition = fastrows.partition(key, lane.partitioner.num_partitions)
        batch.records.append((lane.topic, partition, key, value, fastrows.ROW_HEADER_LIST))
        stats = batch.stats
        stats.bytes += len(value)
        stats.rows += 1
        return True

    def row(
        self, batch: Batch, item: RowItem, op: Op, before: Image, after: Image, ts: int, ref: TxnRef
    ) -> None:
        table = item.table
        self.schema(batch, table, ts)
        # With its schema published a row keyed by primary key takes the native path; what
        # it leaves (another encoding, a key or value it cannot write) is built here.
        if self.fast_row(batch, item, op, before, after, ts, ref.id, ref.index, ref.count):
            return
        lane = self._lane(table)
        topic, partitioner, by_key = lane.topic, lane.partitioner, lane.by_key
        row = row_change(self.source, item, op, before, after, ts, ref)
        if by_key:
            # The common case, with the key encoded once (partition_row encodes it twice).
            image = row.image
            key = encode_key(table.schema, table.table, [image[i] for i in table.pk_indexes])
            partition = java_partition(key, partitioner.num_partitions)
        else:
            key, partition = partitioner.partition_row(row, table)
        self._emit(batch, topic, partition, key, row)
        batch.stats.rows += 1

    def snapshot_rows(
        self,
        batch: Batch,
        table: TableSchema,
        rows: list[tuple[Value, ...]],
        ts: int,
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
    ) -> bool:
        """Rows 1.. with what is the same for the whole chunk computed once (keyed by primary
        key, natively); a row the native encoder leaves goes the general way."""
        if not (self.native and table.primary_key and not position.upstream):
            return False
        topic, partitioner = self.topics.for_table(table.schema, table.table)
        if partitioner.dispatch_for(table.schema, table.table).rule is not (
            DispatchRule.BY_PRIMARY_KEY
        ):
            return False
        n = partitioner.num_partitions
        names = (table.schema, table.table)
        prefix = self._key_prefix(table)
        encode_value = fastrows.read_rows(
            self.source, ts, *names, table.schema_id, table.primary_key, txn_id, position
        )
        pk, records, stats = table.pk_indexes, batch.records, batch.stats
        start = 1
        if len(pk) == 1 and self._record is not None:
            where = (topic, n, prefix)
            start = self._int_keyed_reads(
                batch, table, rows, where, ts, txn_id, first_index, position
            )
        int_key = fastrows.key_maker(prefix, pk)
        read = Op.READ
        for i in range(start, len(rows)):
            after = rows[i]
            value = encode_value(after, first_index + i)
            if value is None:
                item = RowItem(read, table, None, after, position)
                self.row(batch, item, read, None, after, ts, TxnRef(txn_id, first_index + i))
                continue
            key = int_key(after) or encode_key(*names, [after[k] for k in pk])
            records.append(
                (topic, fastrows.partition(key, n), key, value, list(fastrows.ROW_HEADERS))
            )
            stats.bytes += len(value)
            stats.rows += 1
        return True

    def _int_keyed_reads(
        self,
        batch: Batch,
        table: TableSchema,
        rows: list[tuple[Value, ...]],
        where: tuple[str, int, bytes],
        ts: int,
        txn_id: str,
        first_index: int,
        position: BinlogPosition,
    ) -> int:
        """Rows 1.. of a chunk of `table` (keyed by one integer column) as whole records, one
        native call each (`where`: topic, partitions, key prefix), up to the first the
        builder leaves to the general path; returns where it stopped (len(rows) if it did
        not)."""
        assert self._record is not None
        topic, partitions, prefix = where
        build, at, read = self._record, table.pk_indexes[0], fastrows.OP_NUMBERS[Op.READ]
        names, sid, key = (table.schema, table.table), table.schema_id, table.primary_key
        file, offset, gtid = position.file, position.offset, position.gtid
        headers, source = fastrows.ROW_HEADER_LIST, self.source
        append, stats = batch.records.append, batch.stats
        for i in range(1, len(rows)):
            try:
                record = build(
                    topic, headers, prefix, at, partitions, source, ts, read, *names, sid, key,
                    None, rows[i], txn_id, first_index + i, None, file, offset, gtid,
                )  # fmt: skip
            except (ValueError, TypeError, OverflowError):
                record = None
            if record is None:
                return i
            append(record)
            stats.bytes += len(record[3])
            stats.rows += 1
        return len(rows)

    def ddl(self, batch: Batch, ddl: DdlChange, item: DdlItem) -> None:
        topic, partitioner = self.topics.for_table(ddl.schema, ddl.table)
        for key, partition in partitioner.route(ddl):
            self._emit(batch, topic, partition, key, ddl)

    def ddl_slots(self, batch: Batch, ddl: DdlChange) -> list[Slot]:
        topic, partitioner = self.topics.for_table(ddl.schema, ddl.table)
        slots: list[Slot] = []
        for key, partition in partitioner.route(ddl):
            slots.append((len(batch.records), topic, partition, key))
            batch.records.append((topic, partition, key, b"", []))
        return slots

    def fill(self, batch: Batch, slots: list[Slot], ddl: DdlChange, item: DdlItem) -> None:
        value, headers = encode(ddl, self._encoding)
        for index, topic, partition, key in slots:
            batch.records[index] = (topic, partition, key, value, list(headers))
            batch.stats.bytes += len(value)

    def marker(self, batch: Batch, marker: SnapshotMarker) -> None:
        topic, partitioner = self.topics.for_table(marker.schema, marker.table)
        for key, partition in partitioner.route(marker):
            self._emit(batch, topic, partition, key, marker)

    def watermark(self, batch: Batch, record: Resolved | Heartbeat) -> None:
        if not self.topics.written:
            self.topics.for_table("", None)
        value, headers = encode(record, self._encoding)
        for topic, n in self.topics.written.items():
            for partition in range(n):
                batch.records.append((topic, partition, None, value, list(headers)))
