"""Table schemas by id, for row events (which carry a schema id, not column names).

`SchemaCatalog` learns schemas from DDL events it is shown and, for an id it does not know,
reads the compacted schemas topic on from where it stopped, up to its end (on the driver).
Schema ids are content hashes, so a lookup always gives the same answer: replays stay deterministic.

Lifecycle: the constructor does no I/O; the Kafka consumer is made on the first miss and
released by `close()`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rowbus.protocol.codec import decode
from rowbus.protocol.events import SchemaRecord, TableSchema

if TYPE_CHECKING:
    from rowbus.clients.kafka import TopicTail

log = logging.getLogger(__name__)


class SchemaCatalog:
    def __init__(self, kafka: dict[str, Any] | None, topic: str, timeout_s: float = 30.0) -> None:
        self._kafka = kafka
        self._topic = topic
        self._timeout_s = timeout_s
        self._known: dict[int, TableSchema] = {}
        self._tail: TopicTail | None = None

    def add(self, table: TableSchema) -> None:
        self._known.setdefault(table.schema_id, table)

    def get(self, schema_id: int) -> TableSchema | None:
        table = self._known.get(schema_id)
        if table is None and self._kafka is not None:
            self._catch_up()
            table = self._known.get(schema_id)
        return table

    def known(self) -> dict[int, TableSchema]:
        """Every schema learnt so far, by id (what the executors are given in throughput
        mode; a row of another id sends its batch to the driver, which catches up)."""
        return dict(self._known)

    def catch_up(self) -> None:
        """Read the schemas topic on to its end now (throughput mode, before finishing a batch
        a driver before this one began writing: its tasks were given every schema that
        driver had learnt, all of which the topic holds)."""
        if self._kafka is not None:
            self._catch_up()

    def _catch_up(self) -> None:
        from rowbus.clients.kafka import TopicTail

        if self._tail is None:
            self._tail = TopicTail(
                {"group.id": "rowbus-apply-schemas", **(self._kafka or {})}, self._topic
            )
        for msg in self._tail.catch_up(self._timeout_s):
            where = f"{self._topic}[{msg.partition()}]@{msg.offset()}"
            rec = decode(msg.value(), msg.headers(), where)
            if isinstance(rec, SchemaRecord):
                self._known.setdefault(rec.schema_id, rec.table_schema)

    def close(self) -> None:
        if self._tail is not None:
            self._tail.close()
            self._tail = None
