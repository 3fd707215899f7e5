"""The batcher: whole transactions in, the records of one Kafka transaction out (pure).

`Batch` turns each `Transaction` into encoded records — a `SchemaRecord` ahead of the first row
that uses a schema not yet published by this reader, then the transaction's `RowChange` and
`DdlChange` events with their keys and partitions — and decides when to flush (`due`). The
records of a transaction are never split across two batches, except a transaction too big to
hold, which the reader publishes in fragments (`stream`, then `add` for its last part; see
`rowbus.producer.fragments` and PROTOCOL.md §9.1). Every transaction, even one with no wanted
table, takes one tick of the hybrid clock, so the watermark written at a flush (`Resolved` to
every partition) covers everything read so far — except an open fragmented transaction, which
no watermark passes before its last fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from rowbus.producer import fastrows
from rowbus.producer.assembler import Change, DdlItem, RowItem, Transaction
from rowbus.producer.definitions import just_before
from rowbus.producer.fragments import OpenStream
from rowbus.producer.tracker import DdlSchema
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.ddl import DdlKind, parse_ddl
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
    SnapshotMarker,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import DispatchRule, Partitioner, encode_key, java_partition
from rowbus.protocol.topics import data_topic, schema_key
from rowbus.protocol.values import Value

OutRecord = fastrows.OutRecord
Definition = tuple[TableSchema, Sequence[str]]
"""A table's schema and the statements that create it (PROTOCOL.md §9.6)."""


@dataclass
class _PendingDdl:
    """A DDL whose records wait in the batch for its schema after the statement."""

    item: DdlItem
    ddl: DdlChange
    slots: list[tuple[int, str, int | None, bytes | None]]


@dataclass(frozen=True)
class FlushPolicy:
    rows: int = 20_000
    bytes: int = 8 * 1024 * 1024
    interval_s: float = 0.2
    idle_interval_s: float = 1.0
    """A batch that only moves the position (no events) waits this long."""


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
    """The columns whose change moves a row to another key or partition (`_key_changed`)."""
    key: Callable[[tuple[Value, ...]], bytes | None] | None
    """`fastrows.int_key` of the table's rows, when they are encoded natively (else None)."""
    prefix: bytes = b""
    at: int = -1
    """The image position of a one-integer-column key (-1: another key): such rows are built
    by `fastrows.record_builder` in one native call."""


DDL_SCHEMA_WAIT_S = 5.0
"""How long an open batch waits for the next row of a table a DDL changed (its after-schema)."""
_MAX_LANES = 4_096
INSERT, UPDATE, DELETE = Op.INSERT, Op.UPDATE, Op.DELETE
"""`_native_row` finds `fastrows.OP_NUMBERS` by identity (an enum's hash is a Python call)."""


class Batcher:
    """Builds batches for one source. `topics` gives a data topic's partition count
    (creating it if needed); `ddl_schema` the table schema after a DDL."""

    def __init__(
        self,
        source: str,
        clock: HybridClock,
        topic_template: str,
        partitions_of: Callable[[str], int],
        partitioner_for: Callable[[int], Partitioner],
        ddl_schema: Callable[[DdlItem], TableSchema | None],
        schemas_topic: str,
        encoding: Encoding = Encoding.PROTOBUF,
        policy: FlushPolicy | None = None,
    ) -> None:
        self.source = source
        self.clock = clock
        self._template = topic_template
        self._partitions_of = partitions_of
        self._partitioner_for = partitioner_for
        self._ddl_schema = ddl_schema
        self._schemas_topic = schemas_topic
        self._encoding = encoding
        self._native = encoding is Encoding.PROTOBUF and fastrows.AVAILABLE
        """Rows keyed by primary key are encoded natively (`fastrows.row_value`)."""
        self._record = fastrows.record_builder() if self._native else None
        self._key_prefixes: dict[tuple[str, str], bytes] = {}
        self._lanes: dict[int, _Lane] = {}
        """By `id` of the table schema (the lane holds the object, so the id stays its own)."""
        self.policy = policy or FlushPolicy()
        self.published_schemas: set[int] = set()
        self._topic_cache: dict[tuple[str, str], tuple[str, Partitioner]] = {}
        self.topics: dict[str, int] = {}
        self.batch = Batch()
        self._pending: dict[tuple[str, str], list[_PendingDdl]] = {}
        self._pending_since = 0.0
        self.open_stream: OpenStream | None = None
        """The transaction being published in fragments, if any."""

    # ---- topics -----------------------------------------------------------------------------

    def topic_for(self, schema: str, table: str | None) -> tuple[str, Partitioner]:
        key = (schema, table or "")
        found = self._topic_cache.get(key)
        if found is None:
            name = data_topic(self._template, self.source, schema, table or "_")
            n = self._partitions_of(name)
            self.topics[name] = n
            found = self._topic_cache[key] = (name, self._partitioner_for(n))
        return found

    def _lane(self, table: TableSchema) -> _Lane:
        lane = self._lanes.get(id(table))
        if lane is not None and lane.table is table:
            return lane
        topic, partitioner = self.topic_for(table.schema, table.table)
        dispatch = partitioner.dispatch_for(table.schema, table.table)
        by_key = bool(table.primary_key) and dispatch.rule is DispatchRule.BY_PRIMARY_KEY
        watched = set(table.pk_indexes)
        if dispatch.rule is DispatchRule.BY_COLUMNS:
            watched.update(table.index_of(c) for c in dispatch.columns if c in table.column_names)
        key, prefix, at = None, b"", -1
        if by_key and self._native:
            names = (table.schema, table.table)
            prefix = self._key_prefixes.get(names) or fastrows.key_prefix(*names)
            self._key_prefixes[names] = prefix
            key = fastrows.key_maker(prefix, table.pk_indexes)
            if len(table.pk_indexes) == 1 and self._record is not None:
                at = table.pk_indexes[0]
        if len(self._lanes) >= _MAX_LANES:
            self._lanes.clear()  # tables come and go with DDL: bounded, rebuilt when needed
        lane = self._lanes[id(table)] = _Lane(
            table, topic, partitioner, by_key, tuple(sorted(watched)), key, prefix, at
        )
        return lane

    def _emit(self, topic: str, partition: int | None, key: bytes | None, record: Record) -> None:
        value, headers = encode(record, self._encoding)
        self.batch.records.append((topic, partition, key, value, headers))
        self.batch.stats.bytes += len(value)

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
        stream = self.open_stream
        if stream is not None:
            stream.check(txn.id, txn.gtid)
            self.open_stream = None
            if defining:
                self._define(defining, stream.ts, txn.id, txn.changes, stream)
            planned = list(self._plan(txn.changes))
            self._emit_stream(stream, planned, stream.next_index + len(planned))
            return
        ts = self.clock.next(txn.commit_time * 1000)
        if not txn.changes:
            return
        if defining:
            self._define(defining, ts, txn.id, txn.changes)
        planned = list(self._plan(txn.changes))
        count = len(planned)
        txn_id = txn.id
        for index, (item, op, before, after) in enumerate(planned):
            if isinstance(item, DdlItem):
                self._add_ddl(item, ts, TxnRef(txn_id, index, count))
            elif not self._native_row(item, op, before, after, ts, txn_id, index, count):  # type: ignore[arg-type]
                self._add_row(item, op, before, after, ts, TxnRef(txn_id, index, count))
        batch.stats.events += count

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
        if defining:
            self._define(defining, stream.ts, txn_id, changes, stream)
        self._emit_stream(stream, list(self._plan(changes)), None)

    def resume_stream(self, fragment: ReaderCheckpoint) -> None:
        """A restarted reader goes on with the stream its fragment record names (the clock
        is at the checkpoint's ts)."""
        self.open_stream = OpenStream.start(self.clock, fragment.position)

    def _emit_stream(
        self,
        stream: OpenStream,
        planned: list[tuple[RowItem | DdlItem, Op, object, object]],
        count: int | None,
    ) -> None:
        assert stream.txn_id is not None
        emitted = 0
        for item, op, before, after in planned:
            index = stream.next_index
            stream.next_index += 1
            if stream.published(item.position):
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
        sid = table.schema_id
        if sid not in self.published_schemas:
            record = SchemaRecord.of(table, self.source, self.clock.last)
            self._emit(self._schemas_topic, None, schema_key(sid), record)
            self.published_schemas.add(sid)

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
        # The first row the general way (it publishes the schema, resolves pending DDLs)...
        lean = self._lean_reads(table, position)
        for i, after in enumerate(rows if lean is None else rows[:1]):
            item = RowItem(read, table, None, after, position)
            self._add_row(item, read, None, after, ts, TxnRef(txn_id, first_index + i))
        if lean is not None:
            # ... the others with what is the same for the whole chunk computed once.
            topic, partitioner = lean
            n = partitioner.num_partitions
            names = (table.schema, table.table)
            prefix = self._key_prefixes.get(names) or fastrows.key_prefix(*names)
            self._key_prefixes[names] = prefix
            encode_value = fastrows.read_rows(
                self.source, ts, *names, table.schema_id, table.primary_key, txn_id, position
            )
            pk, records, stats = table.pk_indexes, batch.records, batch.stats
            start = 1
            if len(pk) == 1 and self._record is not None:
                start = self._int_keyed_reads(
                    table, rows, (topic, n, prefix), ts, txn_id, first_index, position
                )
            int_key = fastrows.key_maker(prefix, pk)
            for i in range(start, len(rows)):
                after = rows[i]
                value = encode_value(after, first_index + i)
                if value is None:
                    item = RowItem(read, table, None, after, position)
                    self._add_row(item, read, None, after, ts, TxnRef(txn_id, first_index + i))
                    continue
                key = int_key(after) or encode_key(*names, [after[k] for k in pk])
                records.append(
                    (topic, fastrows.partition(key, n), key, value, list(fastrows.ROW_HEADERS))
                )
                stats.bytes += len(value)
                stats.rows += 1
        batch.stats.events += len(rows)
        return ts

    def _int_keyed_reads(
        self,
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
        append, stats = self.batch.records.append, self.batch.stats
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

    def _lean_reads(
        self, table: TableSchema, position: BinlogPosition
    ) -> tuple[str, Partitioner] | None:
        """The topic and partitioner of a chunk of `table` whose rows `_add_row` would encode
        natively by primary key; None when it would not."""
        if not (self._native and table.primary_key and not position.upstream):
            return None
        topic, partitioner = self.topic_for(table.schema, table.table)
        rule = partitioner.dispatch_for(table.schema, table.table).rule
        return (topic, partitioner) if rule is DispatchRule.BY_PRIMARY_KEY else None

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
        topic, partitioner = self.topic_for(marker.schema, marker.table)
        for key, partition in partitioner.route(marker):
            self._emit(topic, partition, key, marker)
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

    def _plan(
        self, changes: list[Change]
    ) -> Iterable[tuple[RowItem | DdlItem, Op, object, object]]:
        for item in changes:
            if isinstance(item, DdlItem):
                yield item, Op.UPDATE, None, None
                continue
            if item.op is Op.UPDATE and self._key_changed(item):
                yield item, Op.DELETE, item.before, None
                yield item, Op.INSERT, None, item.after
                continue
            yield item, item.op, item.before, item.after

    def _key_changed(self, item: RowItem) -> bool:
        """Whether an update moves its row to another key or partition (PROTOCOL.md §6)."""
        table = item.table
        before, after = item.before, item.after
        assert before is not None
        assert after is not None
        return any(before[i] != after[i] for i in self._lane(table).watched)

    def _row(
        self, item: RowItem, op: Op, before: object, after: object, ts: int, ref: TxnRef
    ) -> RowChange:
        table = item.table
        return RowChange(
            source=self.source,
            ts=ts,
            op=op,
            schema=table.schema,
            table=table.table,
            schema_id=table.schema_id,
            primary_key=table.primary_key,
            before=before,  # type: ignore[arg-type]
            after=after,  # type: ignore[arg-type]
            txn=ref,
            position=item.position,
        )

    def _native_row(
        self,
        item: RowItem,
        op: Op,
        before: tuple[Value, ...] | None,
        after: tuple[Value, ...] | None,
        ts: int,
        txn_id: str,
        index: int,
        count: int,
    ) -> bool:
        """`_add_row`'s native path for the common row (its table's schema published, no DDL
        waiting, keyed by primary key): the value from the image, key and partition computed
        once, nothing built per value. False when it does not apply; `_add_row` then does
        what it always did."""
        table = item.table
        if self._pending or table.schema_id not in self.published_schemas:
            return False
        lane = self._lane(table)
        if lane.key is None:
            return False
        position = item.position
        number = 1 if op is INSERT else 2 if op is UPDATE else 3 if op is DELETE else 0
        if lane.at >= 0 and number and not position.upstream:
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
                batch = self.batch
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
        batch = self.batch
        batch.records.append((lane.topic, partition, key, value, fastrows.ROW_HEADER_LIST))
        stats = batch.stats
        stats.bytes += len(value)
        stats.rows += 1
        return True

    def _add_row(
        self, item: RowItem, op: Op, before: object, after: object, ts: int, ref: TxnRef
    ) -> None:
        table = item.table
        if self._pending:
            self._resolve_ddls(table.schema, table.table, table)
        sid = table.schema_id
        if sid not in self.published_schemas:
            self._emit(
                self._schemas_topic, None, schema_key(sid), SchemaRecord.of(table, self.source, ts)
            )
            self.published_schemas.add(sid)
        topic, partitioner = self.topic_for(table.schema, table.table)
        by_key = bool(table.primary_key) and partitioner.dispatch_for(
            table.schema, table.table
        ).rule is (DispatchRule.BY_PRIMARY_KEY)
        if by_key and self._native:
            # The fast path: the value straight from the image, key and hash computed once.
            value = fastrows.row_value(
                self.source,
                ts,
                op,
                table.schema,
                table.table,
                table.schema_id,
                table.primary_key,
                before,  # type: ignore[arg-type]
                after,  # type: ignore[arg-type]
                ref,
                item.position,
            )
            if value is not None:
                image: tuple[Value, ...] = after if after is not None else before  # type: ignore[assignment]
                names = (table.schema, table.table)
                prefix = self._key_prefixes.get(names)
                if prefix is None:
                    prefix = self._key_prefixes[names] = fastrows.key_prefix(*names)
                key = fastrows.int_key(prefix, image, table.pk_indexes) or encode_key(
                    table.schema, table.table, [image[i] for i in table.pk_indexes]
                )
                partition = fastrows.partition(key, partitioner.num_partitions)
                self.batch.records.append(
                    (topic, partition, key, value, list(fastrows.ROW_HEADERS))
                )
                self.batch.stats.bytes += len(value)
                self.batch.stats.rows += 1
                return
        row = self._row(item, op, before, after, ts, ref)
        if by_key:
            # The common case, with the key encoded once (partition_row encodes it twice).
            image = row.image
            key = encode_key(table.schema, table.table, [image[i] for i in table.pk_indexes])
            partition = java_partition(key, partitioner.num_partitions)
        else:
            key, partition = partitioner.partition_row(row, table)
        self._emit(topic, partition, key, row)
        self.batch.stats.rows += 1

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
        topic, partitioner = self.topic_for(schema, table)
        routes = partitioner.route(ddl)
        if item.after is not None and item.after.known:
            # The schema tracker applied the statement: its after-schema is exact.
            if table is not None and self._pending:
                self._resolve_ddls(schema, table, None, fallback=False)
            ddl = replace(ddl, table_schema=item.after.table)
            for key, partition in routes:
                self._emit(topic, partition, key, ddl)
            return
        if table is None or parsed.kind is DdlKind.DROP_TABLE:
            for key, partition in routes:
                self._emit(topic, partition, key, ddl)
            return
        records = self.batch.records
        slots: list[tuple[int, str, int | None, bytes | None]] = []
        for key, partition in routes:
            slots.append((len(records), topic, partition, key))
            records.append((topic, partition, key, b"", []))
        self._pending.setdefault((schema, table), []).append(_PendingDdl(item, ddl, slots))

    def _fill(self, pending: _PendingDdl, after: TableSchema | None) -> None:
        value, headers = encode(replace(pending.ddl, table_schema=after), self._encoding)
        records = self.batch.records
        for index, topic, partition, key in pending.slots:
            records[index] = (topic, partition, key, value, list(headers))
            self.batch.stats.bytes += len(value)

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
        self._broadcast(record)
        return ts

    def add_heartbeat(
        self, reader_id: str, position: BinlogPosition, lag_ms: int, now: float
    ) -> int:
        """A `Heartbeat` with a fresh tick to every partition of every topic written (a
        `Resolved` while a stream is open: no watermark may pass it)."""
        if self.open_stream is not None:
            return self.add_resolved()
        ts = self.clock.next(int(now * 1000))
        self._broadcast(
            Heartbeat(
                source=self.source, ts=ts, reader_id=reader_id, position=position, lag_ms=lag_ms
            )
        )
        return ts

    def _broadcast(self, record: Resolved | Heartbeat) -> None:
        if not self.topics:
            self.topic_for("", None)
        value, headers = encode(record, self._encoding)
        for topic, n in self.topics.items():
            for partition in range(n):
                self.batch.records.append((topic, partition, None, value, list(headers)))

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
