"""The control topic as a log of `ControlRecord`: read it to its end, follow it, append to it.

One partition (protocol.topics.CONTROL_TOPIC_PARTITIONS), so every actor sees one order.
Lifecycle: the constructor does no I/O; `start()` builds the clients (an idempotent producer,
``acks=all``, and a ``read_committed`` consumer assigned to partition 0 from the beginning);
`close()` flushes and releases them.

Delivery: `publish` returns once the broker acknowledged the record (at-least-once; the
idempotent producer removes retry duplicates, and the lock state machine ignores a record that
repeats one it applied, so a duplicate from a restarted actor is harmless). `read_to_end`
returns every record up to the end offset seen when it was called: what a restarted actor
replays to rebuild the lock table.

Kafka errors are translated here into `ControlTopicError` (`retryable` follows the error).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rowbus.consumers.shard_ddl.exceptions import ControlTopicError
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import ControlRecord
from rowbus.protocol.topics import CONTROL_TOPIC, CONTROL_TOPIC_CONFIG, control_key

log = logging.getLogger(__name__)

ClientConfig = Mapping[str, str | int | float | bool]


class KafkaMessage(Protocol):
    """What is read from `confluent_kafka.Message` (which tests cannot construct)."""

    def error(self) -> Any: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...
    def offset(self) -> int | None: ...


class ControlLog:
    """Append to and read the control topic."""

    def __init__(
        self,
        client: ClientConfig,
        topic: str = CONTROL_TOPIC,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self._client = dict(client)
        self._clock = clock
        self._producer: Any = None
        self._consumer: Any = None
        self.next_offset = 0

    def start(self) -> ControlLog:
        from confluent_kafka import KafkaException, TopicPartition

        from rowbus.clients import kafka

        try:
            self._producer = kafka.producer(self._client, **{"linger.ms": 0})
            self._consumer = kafka.consumer(
                {
                    **self._client,
                    "group.id": f"rowbus-shard-ddl-{id(self)}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 50,
                }
            )
            self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        except KafkaException as exc:
            raise _translate(exc, f"cannot open control topic {self.topic}") from exc
        return self

    def __enter__(self) -> ControlLog:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def ensure_topic(self, timeout: float = 15.0) -> None:
        """Create the control topic (one partition, its recommended config) if it is missing."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        from rowbus.clients import kafka

        admin = kafka.admin(self._client)
        try:
            if self.topic in admin.list_topics(timeout=timeout).topics:
                return
            fut = admin.create_topics(
                [NewTopic(self.topic, 1, 1, config=dict(CONTROL_TOPIC_CONFIG))]
            )[self.topic]
            fut.result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise _translate(exc, f"cannot create control topic {self.topic}") from exc

    def publish(self, record: ControlRecord, timeout: float = 15.0) -> int:
        """Append `record`, wait for the broker's acknowledgement; its offset."""
        from confluent_kafka import KafkaException

        errors: list[Any] = []
        offsets: list[int] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                offsets.append(int(msg.offset()))

        value, headers = encode(record)
        try:
            self._producer.produce(
                self.topic,
                value=value,
                key=control_key(record.lock_id),
                headers=headers,
                partition=0,
                on_delivery=delivered,
            )
            left = self._producer.flush(timeout)
        except KafkaException as exc:
            raise _translate(exc, f"cannot publish to {self.topic}") from exc
        if errors:
            err = errors[0]
            raise ControlTopicError(
                f"publishing {record.kind.value} of {record.lock_id} to {self.topic}[0]: {err}",
                retryable=bool(err.retriable()),
            )
        if left or not offsets:
            raise ControlTopicError(f"publishing to {self.topic}[0] timed out", retryable=True)
        log.debug(
            "published %s %s by %s at %s[0]@%s",
            record.kind.value,
            record.lock_id,
            record.actor,
            self.topic,
            offsets[0],
        )
        return offsets[0]

    def end_offset(self, timeout: float = 10.0) -> int:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=timeout, cached=False
            )
        except KafkaException as exc:
            raise _translate(exc, f"cannot read the end of {self.topic}[0]") from exc
        return int(high)

    def poll(self, timeout: float = 0.0, max_records: int = 500) -> list[ControlRecord]:
        """Records that arrived since the last call (waits at most `timeout` for the first)."""
        out: list[ControlRecord] = []
        msgs = self._consumer.consume(max_records, timeout)
        for msg in msgs:
            record = self._record(msg)
            if record is not None:
                out.append(record)
        return out

    def read_to_end(self, timeout: float = 30.0) -> list[ControlRecord]:
        """Every record up to the end offset as of now."""
        end = self.end_offset()
        deadline = self._clock() + timeout
        out: list[ControlRecord] = []
        while self.next_offset < end:
            if self._clock() >= deadline:
                raise ControlTopicError(
                    f"reading {self.topic}[0] to offset {end} timed out at {self.next_offset}",
                    retryable=True,
                )
            out.extend(self.poll(0.2))
        return out

    def _record(self, msg: KafkaMessage) -> ControlRecord | None:
        err = msg.error()
        if err is not None:
            if err.code() == -191:  # _PARTITION_EOF
                return None
            raise ControlTopicError(f"reading {self.topic}[0]: {err}", retryable=err.retriable())
        offset = msg.offset() or 0
        self.next_offset = max(self.next_offset, offset + 1)
        where = f"{self.topic}[0]@{offset}"
        try:
            record = decode(msg.value(), msg.headers(), where)
        except ProtocolError as exc:
            log.warning("skipping a bad control record: %s", exc)
            return None
        if not isinstance(record, ControlRecord):
            log.warning("skipping %s: not a control record", where)
            return None
        return record


def _translate(exc: Exception, what: str) -> ControlTopicError:
    err = exc.args[0] if exc.args else None
    retryable = bool(getattr(err, "retriable", lambda: False)())
    return ControlTopicError(f"{what}: {err or exc}", retryable=retryable)
