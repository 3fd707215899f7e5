"""A small transactional publisher of protocol events, standing in for a reader."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from confluent_kafka import Producer

from rowbus.config import Settings
from rowbus.protocol.codec import encode
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    Event,
    Op,
    Resolved,
    RowChange,
    SchemaRecord,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import compose

T0_MS = 1_750_000_000_000
TABLE = TableSchema("db", "t", (ColumnSchema("id", "bigint"), ColumnSchema("k", "int")), ("id",))


def txn_events(source: str, k: int, rank: int, rows: int = 3) -> list[RowChange]:
    """Transaction `k` of a source; sources of different `rank` interleave by ts."""
    ts = compose(T0_MS + 10 * k + rank)
    return [
        RowChange(
            source=source,
            ts=ts,
            op=Op.INSERT,
            schema="db",
            table="t",
            schema_id=TABLE.schema_id,
            primary_key=("id",),
            before=None,
            after=(k * 100 + i, k),
            txn=TxnRef(f"{source}-{k}", i, rows),
            position=BinlogPosition("bin.000001", 1000 + k * 100 + i * 10, f"0-1-{k}"),
        )
        for i in range(rows)
    ]


class TestPublisher:
    """Publishes transactions of one source to the topic of the same name (topic template
    ``{source}``), a Resolved broadcast after each."""

    __test__ = False

    def __init__(self, services: Settings, source: str, rank: int, partitions: int = 3) -> None:
        self.source, self.topic, self.rank, self.partitions = source, source, rank, partitions
        self.producer = Producer(
            services.kafka.client_config(**{"transactional.id": f"test-{source}"})
        )
        self.producer.init_transactions(15)

    def records(self, k: int) -> Iterator[tuple[int, Event]]:
        events = txn_events(self.source, k, self.rank)
        for event in events:
            yield (event.txn.index + k) % self.partitions, event
        for p in range(self.partitions):
            yield p, Resolved(source=self.source, ts=events[0].ts)

    def publish(self, ks: range) -> None:
        self.producer.begin_transaction()
        for k in ks:
            for partition, event in self.records(k):
                value, headers = encode(event)
                self.producer.produce(self.topic, value, partition=partition, headers=headers)
        self.producer.commit_transaction(15)


def publish_schema(services: Settings, topic: str) -> None:
    """Put `TABLE` in the schemas topic `topic`."""
    producer = Producer(services.kafka.client_config())
    value, headers = encode(SchemaRecord.of(TABLE, "test", compose(T0_MS)))
    producer.produce(topic, value, headers=headers)
    assert producer.flush(15) == 0


def publish_in_background(
    services: Settings, sources: Sequence[str], total: int
) -> threading.Thread:
    """Publish transactions 0..total-1 of every source, interleaved 10 at a time, from a
    started thread (the caller joins it)."""
    publishers = [TestPublisher(services, s, rank) for rank, s in enumerate(sources)]

    def publish() -> None:
        for start in range(0, total, 10):
            for p in publishers:
                p.publish(range(start, start + 10))

    writer = threading.Thread(target=publish)
    writer.start()
    return writer
