"""Table schemas by id, for row events (which carry a schema id, not column names).

`SchemaCatalog` learns schemas from DDL events it is shown and, for an id it does not know,
reads the compacted schemas topic up to its end (on the driver). Schema ids are content hashes,
so a lookup always gives the same answer: replays stay deterministic.

Lifecycle: the constructor does no I/O; the Kafka consumer is made on the first miss and
released by `close()`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from rowbus.protocol.codec import decode
from rowbus.protocol.events import SchemaRecord, TableSchema

log = logging.getLogger(__name__)


class SchemaCatalog:
    def __init__(self, kafka: dict[str, Any] | None, topic: str, timeout_s: float = 30.0) -> None:
        self._kafka = kafka
        self._topic = topic
        self._timeout_s = timeout_s
        self._known: dict[int, TableSchema] = {}
        self._consumer: Any = None
        self._next: dict[int, int] = {}

    def add(self, table: TableSchema) -> None:
        self._known.setdefault(table.schema_id, table)

    def get(self, schema_id: int) -> TableSchema | None:
        table = self._known.get(schema_id)
        if table is None and self._kafka is not None:
            self._catch_up()
            table = self._known.get(schema_id)
        return table

    def _catch_up(self) -> None:
        from confluent_kafka import TopicPartition

        from rowbus.clients import kafka

        if self._consumer is None:
            self._consumer = kafka.consumer(
                {
                    "group.id": "rowbus-apply-schemas",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "receive.message.max.bytes": 200_000_000,
                    **(self._kafka or {}),
                }
            )
        c = self._consumer
        meta = c.list_topics(self._topic, timeout=10).topics.get(self._topic)
        if meta is None or meta.error is not None:
            log.warning("schemas topic %s is not readable", self._topic)
            return
        deadline = time.monotonic() + self._timeout_s
        for p in sorted(meta.partitions):
            _, end = c.get_watermark_offsets(TopicPartition(self._topic, p), timeout=10)
            start = self._next.get(p, 0)
            if start >= end:
                continue
            c.assign([TopicPartition(self._topic, p, start)])
            while self._next.get(p, start) < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading schemas topic {self._topic}[{p}] to {end}")
                for msg in c.consume(1000, 0.2):
                    if msg.error() is not None:
                        continue
                    self._next[p] = msg.offset() + 1
                    rec = decode(msg.value(), msg.headers(), f"{self._topic}[{p}]@{msg.offset()}")
                    if isinstance(rec, SchemaRecord):
                        self._known.setdefault(rec.schema_id, rec.table_schema)
                (pos,) = c.position([TopicPartition(self._topic, p)])
                if pos.offset >= end:
                    self._next[p] = max(self._next.get(p, 0), pos.offset)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
