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

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from rowbus.clients.errors import KafkaClientError
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import ControlRecord
from rowbus.protocol.topics import CONTROL_TOPIC, CONTROL_TOPIC_CONFIG, control_key
from rowbus.shard_ddl.exceptions import ControlTopicError

if TYPE_CHECKING:
    from rowbus.clients.kafka import Message, TopicTail

log = logging.getLogger(__name__)

ClientConfig = Mapping[str, str | int | float | bool]


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
        self._tail: TopicTail | None = None
        self.next_offset = 0

    def start(self) -> ControlLog:
        from confluent_kafka import KafkaException

        from rowbus.clients import kafka

        try:
            self._producer = kafka.producer(self._client, **{"linger.ms": 0})
        except KafkaException as exc:
            raise _translate(exc, f"cannot open control topic {self.topic}") from exc
        self._tail = kafka.TopicTail(
            {**self._client, "group.id": f"rowbus-shard-ddl-{id(self)}", "fetch.wait.max.ms": 50},
            self.topic,
            clock=self._clock,
        )
        return self

    def __enter__(self) -> ControlLog:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._producer is not None:
            from rowbus.clients import kafka

            producer, self._producer = self._producer, None
            kafka.close_producer(producer)
        if self._tail is not None:
            self._tail.close()
            self._tail = None

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

    def poll(self, timeout: float = 0.0, max_records: int = 500) -> list[ControlRecord]:
        """Records that arrived since the last call (waits at most `timeout` for the first)."""
        assert self._tail is not None, "start() first"
        with _errors(f"reading {self.topic}[0]"):
            if not self._tail.open():
                return []
            msgs = self._tail.poll(timeout, max_records)
        return [r for r in map(self._record, msgs) if r is not None]

    def read_to_end(self, timeout: float = 30.0) -> list[ControlRecord]:
        """Every record up to the end offset as of now."""
        assert self._tail is not None, "start() first"
        with _errors(f"reading {self.topic}[0] to its end"):
            msgs = self._tail.catch_up(timeout)
        return [r for r in map(self._record, msgs) if r is not None]

    def _record(self, msg: Message) -> ControlRecord | None:
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


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    try:
        yield
    except KafkaClientError as exc:
        raise ControlTopicError(f"{what}: {exc}", retryable=exc.retryable) from exc


def _translate(exc: Exception, what: str) -> ControlTopicError:
    err = exc.args[0] if exc.args else None
    retryable = bool(getattr(err, "retriable", lambda: False)())
    return ControlTopicError(f"{what}: {err or exc}", retryable=retryable)
