"""A transactional test publisher of protocol events, and a W2-like model of upstream tables.

Until a test uses the real readers, upstream changes are generated here: one Kafka transaction
per upstream transaction (its rows, then a Resolved at its ts to every partition), exactly what
a reader publishes, while `Model` keeps the expected final tables.
"""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from confluent_kafka import Producer

from rowbus.protocol.codec import encode
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    DdlChange,
    Op,
    Resolved,
    RowChange,
    SchemaRecord,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import encode_key, java_partition
from rowbus.protocol.values import Value

COLUMNS = (
    ColumnSchema(name="id", type="bigint", nullable=False),
    ColumnSchema(name="qty", type="int"),
    ColumnSchema(name="label", type="varchar", length=32),
    ColumnSchema(name="price", type="decimal", precision=12, scale=2),
    ColumnSchema(name="updated", type="datetime", fsp=6),
)
SINK_DDL = (
    "CREATE TABLE `{db}`.`{table}` (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(32), "
    "price DECIMAL(12,2), updated DATETIME(6))"
)


class Publisher:
    """Publishes one source's transactions; `close()` flushes."""

    def __init__(
        self, kafka: dict[str, Any], topic: str, schemas_topic: str, source: str, partitions: int
    ) -> None:
        self.topic, self.schemas_topic, self.source = topic, schemas_topic, source
        self.partitions = partitions
        self.clock = HybridClock()
        self.producer = Producer(
            {**kafka, "transactional.id": f"test-{uuid.uuid4().hex}", "linger.ms": 5}
        )
        self.producer.init_transactions(15)
        self.position = 4
        self.records = self.value_bytes = 0
        """Records and value bytes published to the data topic."""

    def _send(self, topic: str, partition: int, record: Any, key: bytes | None = None) -> None:
        value, headers = encode(record)
        if topic == self.topic:
            self.records += 1
            self.value_bytes += len(value)
        self.producer.produce(topic, value, key, partition=partition, headers=headers)

    def schemas(self, tables: list[TableSchema]) -> None:
        self.producer.begin_transaction()
        for t in tables:
            self._send(self.schemas_topic, 0, SchemaRecord.of(t, self.source, 0))
        self.producer.commit_transaction(15)

    def txn(
        self,
        changes: list[tuple[Op, TableSchema, tuple[Value, ...] | None, tuple[Value, ...] | None]],
        ddl: tuple[str, TableSchema] | None = None,
    ) -> int:
        ts = self.clock.next(int(time.time() * 1000))
        self.producer.begin_transaction()
        gtid = f"0-1-{self.position}"
        if ddl is not None:
            statement, tbl = ddl
            self.position += 1
            ev: Any = DdlChange(
                source=self.source,
                ts=ts,
                schema=tbl.schema,
                table=tbl.table,
                statement=statement,
                table_schema=tbl,
                position=BinlogPosition("bin.000001", self.position),
            )
            for p in range(self.partitions):
                self._send(self.topic, p, ev)
        for i, (op, tbl, before, after) in enumerate(changes):
            self.position += 1
            ev = RowChange(
                source=self.source,
                ts=ts,
                op=op,
                schema=tbl.schema,
                table=tbl.table,
                schema_id=tbl.schema_id,
                primary_key=tbl.primary_key,
                before=before,
                after=after,
                txn=TxnRef(gtid, i, len(changes)),
                position=BinlogPosition("bin.000001", self.position, gtid),
            )
            key = encode_key(tbl.schema, tbl.table, (ev.image[0],))
            self._send(self.topic, java_partition(key, self.partitions), ev, key)
        for p in range(self.partitions):
            self._send(self.topic, p, Resolved(source=self.source, ts=ts))
        self.producer.commit_transaction(15)
        return ts

    def close(self) -> None:
        self.producer.flush(15)


@dataclass
class Model:
    """Upstream tables of one source (W2: 60% update / 20% insert / 20% delete) and their
    expected final content."""

    schema: str
    tables: int = 8
    seed: int = 2
    rows: dict[str, dict[int, tuple[Value, ...]]] = field(default_factory=dict)
    table_schemas: dict[str, TableSchema] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_key = 1
        for i in range(self.tables):
            name = f"t{i}"
            self.rows[name] = {}
            self.table_schemas[name] = TableSchema(self.schema, name, COLUMNS, ("id",))

    def alter_add_note(self, name: str) -> tuple[str, TableSchema]:
        old = self.table_schemas[name]
        new = TableSchema(
            old.schema, name, (*old.columns, ColumnSchema(name="note", type="varchar")), ("id",)
        )
        self.table_schemas[name] = new
        self.rows[name] = {k: (*v, None) for k, v in self.rows[name].items()}
        return f"ALTER TABLE `{name}` ADD COLUMN note VARCHAR(16) NULL", new

    def _values(self, key: int, tbl: TableSchema) -> tuple[Value, ...]:
        base: tuple[Value, ...] = (
            key,
            self.rng.randint(0, 1000),
            f"l{self.rng.randint(0, 999)}",
            Decimal(self.rng.randint(0, 10**8)) / 100,
            dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=self.rng.randint(0, 10**13)),
        )
        return base + (f"n{key}",) * (len(tbl.columns) - len(base))

    def step(self) -> tuple[Op, TableSchema, tuple[Value, ...] | None, tuple[Value, ...] | None]:
        name = f"t{self.rng.randrange(self.tables)}"
        tbl, rows = self.table_schemas[name], self.rows[name]
        roll = self.rng.random()
        if roll < 0.2 or not rows:
            key = self.next_key
            self.next_key += 1
            rows[key] = self._values(key, tbl)
            return Op.INSERT, tbl, None, rows[key]
        key = self.rng.choice(sorted(rows))
        if roll < 0.4:
            return Op.DELETE, tbl, rows.pop(key), None
        before = rows[key]
        rows[key] = self._values(key, tbl)
        return Op.UPDATE, tbl, before, rows[key]
