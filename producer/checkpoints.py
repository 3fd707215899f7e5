"""The reader's checkpoint store: the last `ReaderCheckpoint` of a source, read from the
compacted checkpoints topic (read to the end, read_committed; the last record for the key wins).

Writing happens inside the publisher's transactions, next to the data it covers; this module
only reads. Read it *after* ``init_transactions``: that aborts a zombie's open transaction, so
the end of the topic is final for this source.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from rowbus.clients import kafka
from rowbus.producer.exceptions import PublishError, ReaderError
from rowbus.producer.publisher import translate_kafka_error
from rowbus.protocol.codec import decode
from rowbus.protocol.events import ReaderCheckpoint
from rowbus.protocol.topics import checkpoint_key

log = logging.getLogger(__name__)


def load_checkpoint(
    client_config: Mapping[str, Any], topic: str, source: str, timeout_s: float = 30.0
) -> ReaderCheckpoint | None:
    """The last committed checkpoint of `source` on `topic`, or None."""
    consumer = kafka.consumer(
        {
            **client_config,
            "group.id": f"rowbus-reader-checkpoints-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "receive.message.max.bytes": 200_000_000,
        }
    )
    key = checkpoint_key(source)
    found: ReaderCheckpoint | None = None
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return None
        parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
        consumer.assign(parts)
        pending = {p.partition for p in parts}
        # An empty partition may report EOF only once its (low == high) watermark is fetched.
        for p in list(pending):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high <= low:
                pending.discard(p)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise PublishError(f"reading {topic} to its end took over {timeout_s:.0f}s")
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise translate_kafka_error(err, f"reading {topic}")
                if msg.key() != key:
                    continue
                where = f"{topic}[{msg.partition()}]@{msg.offset()}"
                headers: Any = msg.headers()
                record = decode(msg.value(), headers, where)
                if isinstance(record, ReaderCheckpoint):
                    found = record
    except KafkaException as exc:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        raise translate_kafka_error(err, f"reading {topic}") from exc
    except ReaderError:
        raise
    finally:
        consumer.close()
    if found is not None:
        log.info(
            "checkpoint of %s: binlog %s:%s gtid=%s epoch %s",
            source,
            found.position.file,
            found.position.offset,
            found.gtid_set,
            found.epoch,
        )
    return found
