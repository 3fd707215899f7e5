"""A checkpoint in the consumer group's committed offsets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consumers.checkpoint import Checkpoint
from consumers.exceptions import CheckpointError
from consumers.stores.base import CheckpointStore

_METADATA_LIMIT = 4096  # Kafka's default offset.metadata.max.bytes


class KafkaOffsetStore(CheckpointStore):
    """Offsets committed for consumer group `group_id` on the subscribed `topics`.

    The offsets are the checkpoint's; the rest of it (floors, watermarks) rides in the commit
    metadata of the first partition, so tools that show group lag show the subscriber's real
    position. At least once. The checkpoint JSON must fit Kafka's metadata limit (4 KB by
    default): CheckpointError otherwise — use another store for very many lanes.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        *,
        group_id: str,
        topics: tuple[str, ...],
        timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self._config = dict(kafka_config)
        self.group_id = group_id
        self.topics = topics
        self._timeout = timeout
        self._consumer: Any = None

    def open(self) -> None:
        from confluent_kafka import Consumer

        self._consumer = Consumer(
            {
                **self._config,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _partitions(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        meta = self._consumer.list_topics(timeout=self._timeout)
        out = []
        for topic in self.topics:
            t = meta.topics.get(topic)
            if t is None or t.error is not None:
                raise CheckpointError(f"topic {topic} is not available for group {self.group_id}")
            out += [TopicPartition(topic, p) for p in sorted(t.partitions)]
        return out

    def _load(self) -> Checkpoint | None:
        from confluent_kafka import KafkaException

        if self._consumer is None:
            raise CheckpointError("the Kafka offset store is not open")
        try:
            committed = self._consumer.committed(self._partitions(), timeout=self._timeout)
        except KafkaException as exc:
            raise CheckpointError(f"cannot read offsets of {self.group_id}: {exc}") from exc
        meta = next((tp.metadata for tp in committed if tp.metadata), None)
        if meta is None:
            return None
        checkpoint = Checkpoint.from_json(meta)
        offsets = dict(checkpoint.offsets)
        for tp in committed:
            if tp.offset >= 0:
                offsets[tp.topic, tp.partition] = tp.offset
        return Checkpoint(offsets, checkpoint.floors, checkpoint.watermarks, checkpoint.ts)

    def _save(self, checkpoint: Checkpoint) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if self._consumer is None:
            raise CheckpointError("the Kafka offset store is not open")
        meta = checkpoint.to_json()
        if len(meta.encode()) > _METADATA_LIMIT:
            raise CheckpointError(
                f"checkpoint of {len(meta)} bytes exceeds Kafka's offset metadata limit"
            )
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(checkpoint.offsets.items())]
        if not tps:
            return
        tps[0] = TopicPartition(tps[0].topic, tps[0].partition, tps[0].offset, meta)
        try:
            self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise CheckpointError(f"cannot commit offsets of {self.group_id}: {exc}") from exc
