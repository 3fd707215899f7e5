"""The reader's checkpoint store: the last `ReaderCheckpoint` of a source (and, while a huge
transaction is published in fragments, its fragment record), read from the compacted
checkpoints topic; the last record for a key wins.

The topic is shared by every source, so another source's Kafka transaction may be open on it:
under read_committed a consumer stops at the last stable offset (LSO), before that open
transaction, and a checkpoint of ours committed after it would be invisible — a stale resume
point (duplicates, and a clock behind watermarks already published). So the read goes on until
the consumer has passed the *high watermark* taken when the read starts: read_committed still
hides aborted records (they are never used), and the wait lasts until the other source's
transaction ends (a batch: well under a second). A transaction that stays open longer than
`timeout_s` (a broker that never times out a crashed producer's transaction) is reported with
the stalled LSO, retryably, instead of being read past.

Writing happens inside the publisher's transactions, next to the data it covers; this module
only reads. Read it *after* ``init_transactions``: that aborts a zombie's open transaction, so
every record of this source below the high watermark is final.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from rowbus.clients import kafka
from rowbus.producer.exceptions import PublishError
from rowbus.producer.publisher import translate_kafka_error
from rowbus.protocol.codec import decode
from rowbus.protocol.ddl import TableName
from rowbus.protocol.events import ReaderCheckpoint, SchemaRecord, TableSchema
from rowbus.protocol.topics import checkpoint_key, fragment_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredCheckpoint:
    """What a reader resumes from: its checkpoint, and the fragment record of the transaction
    it was publishing in fragments when it stopped (None when none was open)."""

    checkpoint: ReaderCheckpoint | None
    fragment: ReaderCheckpoint | None
    tables: dict[TableName, TableSchema | None] = field(default_factory=dict)
    """The schema tracker's table states stored with the checkpoint (None: not known)."""


def load_checkpoint(
    client_config: Mapping[str, Any], topic: str, source: str, timeout_s: float = 30.0
) -> ReaderCheckpoint | None:
    """The last committed checkpoint of `source` on `topic`, or None."""
    return load_checkpoints(client_config, topic, source, timeout_s).checkpoint


def load_checkpoints(
    client_config: Mapping[str, Any], topic: str, source: str, timeout_s: float = 30.0
) -> StoredCheckpoint:
    """The last committed checkpoint of `source` and its open fragment record (a fragment
    record counts only when it comes after the last checkpoint: a transaction that completed
    wrote a checkpoint after its last fragment)."""
    key, open_key = checkpoint_key(source), fragment_key(source)
    found: ReaderCheckpoint | None = None
    fragment: ReaderCheckpoint | None = None
    tables: dict[TableName, TableSchema | None] = {}
    prefix = f"{source}/table/".encode()
    for msg in _committed(client_config, topic, timeout_s):
        k = msg.key()
        state = k is not None and k.startswith(prefix)
        if k not in (key, open_key) and not state:
            continue
        where = f"{topic}[{msg.partition()}]@{msg.offset()}"
        headers: Any = msg.headers()
        record = decode(msg.value(), headers, where)
        if state and isinstance(record, SchemaRecord):
            t = record.table_schema
            tables[TableName(t.schema, t.table)] = t if t.columns else None
            continue
        if not isinstance(record, ReaderCheckpoint):
            continue
        if k == key:
            found, fragment = record, None
        else:
            fragment = record
    if found is not None:
        log.info(
            "checkpoint of %s: binlog %s:%s gtid=%s epoch %s",
            source,
            found.position.file,
            found.position.offset,
            found.gtid_set,
            found.epoch,
        )
    if fragment is not None:
        log.info(
            "%s was publishing transaction %s in fragments, up to binlog %s",
            source,
            fragment.position.gtid,
            fragment.position,
        )
    return StoredCheckpoint(found, fragment, tables if found is not None else {})


def load_writer(
    client_config: Mapping[str, Any], topic: str, fence_id: str, timeout_s: float = 30.0
) -> str | None:
    """The transactional.id the last term of a source's reader claimed on the writers topic
    `topic` under its stable id `fence_id` (`KafkaPublisher.rotate`), or None when none
    ever did."""
    key = fence_id.encode()
    claimed: str | None = None
    for msg in _committed(client_config, topic, timeout_s):
        value = msg.value()
        if msg.key() == key and value:
            claimed = bytes(value).decode()
    return claimed


def _committed(client_config: Mapping[str, Any], topic: str, timeout_s: float) -> Iterator[Message]:
    """Every committed record of `topic` from its beginning up to the high watermarks taken
    when the read starts; nothing when the topic does not exist yet."""
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
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return
        ends = kafka.high_watermarks(
            kafka.admin(client_config), [(topic, p) for p in meta.partitions], timeout_s
        )
        yield from _read_to_high_watermark(consumer, topic, ends, timeout_s)
    except KafkaException as exc:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        raise translate_kafka_error(err, f"reading {topic}") from exc
    finally:
        consumer.close()


def _read_to_high_watermark(
    consumer: Any, topic: str, highs: Mapping[tuple[str, int], int], timeout_s: float
) -> Iterator[Message]:
    """The committed messages of `topic` up to each partition's high watermark `highs` (the
    high watermark, not the LSO: see the module docstring)."""
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for _, p in highs])
    ends: dict[int, int] = {}
    for (_, p), high in highs.items():
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
        if high > low:
            ends[p] = high
    log.info("reading checkpoints from %s up to its high watermarks %s", topic, ends)
    reached: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while ends:
        if time.monotonic() > deadline:
            stalled = ", ".join(
                f"{topic}[{p}] at {reached.get(p, 0)} of {end}" for p, end in ends.items()
            )
            raise PublishError(
                f"reading {topic} up to its high watermark took over {timeout_s:.0f}s: "
                f"another producer's transaction holds the last stable offset ({stalled})",
                "LSO_STALLED",
                retryable=True,
            )
        # consume() waits for all 1000 or the timeout: a short one, or every read of a small
        # topic (a takeover's) costs the whole timeout.
        for msg in consumer.consume(1000, timeout=0.05):
            err = msg.error()
            p, offset = msg.partition() or 0, msg.offset() or 0
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise translate_kafka_error(err, f"reading {topic}")
                reached[p] = max(reached.get(p, 0), offset)
                if reached[p] >= ends.get(p, 0):
                    ends.pop(p, None)
                continue
            if p in ends and offset + 1 >= ends[p]:
                ends.pop(p)
            yield msg
        for p in list(ends):
            # An aborted transaction or a commit marker at the end yields no message; the
            # position still moves past it once the LSO does.
            (pos,) = consumer.position([TopicPartition(topic, p)])
            if pos.offset >= ends[p]:
                ends.pop(p)
