"""A checkpoint in the consumer group's committed offsets."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping
from typing import Any

from rowbus.consumers.stores.base import CheckpointStore
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.exceptions import CheckpointError

METADATA_LIMIT = 4096
"""Kafka's default ``offset.metadata.max.bytes``."""
_COMPRESS_OVER = 1024


def _pack(text: str) -> str:
    if len(text) <= _COMPRESS_OVER:
        return text
    return "z:" + base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def _unpack(meta: str) -> str:
    if not meta.startswith("z:"):
        return meta
    try:
        return zlib.decompress(base64.b64decode(meta[2:])).decode("utf-8")
    except (ValueError, zlib.error) as exc:
        raise CheckpointError(f"unreadable compressed checkpoint: {exc}") from exc


class KafkaOffsetStore(CheckpointStore):
    """Offsets committed for consumer group `group_id` on the subscribed `topics`.

    The offsets are the checkpoint's; the rest of it (floors, watermarks) rides in the commit
    metadata of the first partition, so tools that show group lag show the subscriber's real
    position. A checkpoint JSON over 1 KB is stored zlib-compressed (base64, prefix ``z:``);
    one that still exceeds the broker's ``offset.metadata.max.bytes`` (4096 by default) is
    refused with CheckpointError — raise that broker setting or use another store.

    Guarantee: at least once. The commit is separate from the handler's work, so after a crash
    the transactions handled since the last save are delivered again; nothing at or before the
    saved checkpoint is.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        *,
        group_id: str,
        topics: tuple[str, ...],
        timeout: float = 10.0,
        metadata_limit: int = METADATA_LIMIT,
    ) -> None:
        super().__init__()
        self.metadata_limit = metadata_limit
        self._config = dict(kafka_config)
        self.group_id = group_id
        self.topics = topics
        self._timeout = timeout
        self._consumer: Any = None

    def open(self) -> None:
        from rowbus.clients import kafka

        self._consumer = kafka.consumer(
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
        checkpoint = Checkpoint.from_json(_unpack(meta))
        offsets = dict(checkpoint.offsets)
        for tp in committed:
            if tp.offset >= 0:
                offsets[tp.topic, tp.partition] = tp.offset
        return Checkpoint(offsets, checkpoint.floors, checkpoint.watermarks, checkpoint.ts)

    def _save(self, checkpoint: Checkpoint) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        if self._consumer is None:
            raise CheckpointError("the Kafka offset store is not open")
        meta = _pack(checkpoint.to_json())
        if len(meta.encode()) > self.metadata_limit:
            raise CheckpointError(
                f"the checkpoint of group {self.group_id} takes {len(meta.encode())} bytes "
                f"compressed, over the {self.metadata_limit}-byte offset metadata limit (the "
                "broker's offset.metadata.max.bytes): raise it, pass metadata_limit, or use "
                "another checkpoint store"
            )
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(checkpoint.offsets.items())]
        if not tps:
            return
        tps[0] = TopicPartition(tps[0].topic, tps[0].partition, tps[0].offset, meta)
        try:
            self._consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            raise CheckpointError(f"cannot commit offsets of {self.group_id}: {exc}") from exc
