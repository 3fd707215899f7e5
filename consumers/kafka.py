"""The one seam around confluent-kafka: a read_committed, assign-only consumer.

Foreign errors become `KafkaClientError` here (retryable when librdkafka says so).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from rowbus.consumers.checkpoint import TopicPartition
from rowbus.consumers.exceptions import KafkaClientError
from rowbus.protocol.codec import decode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import Record


class Message(Protocol):
    """What the subscriber uses of `confluent_kafka.Message` (which tests cannot build)."""

    def error(self) -> Any: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def value(self) -> bytes | None: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...


@contextmanager
def kafka_errors(what: str) -> Iterator[None]:
    """Translate confluent-kafka errors raised inside into KafkaClientError."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        retryable = bool(getattr(err, "retriable", lambda: False)())
        raise KafkaClientError(f"{what}: {exc}", retryable=retryable) from exc


class KafkaReader:
    """An assign-only consumer; `open()` builds the client, `close()` closes it."""

    def __init__(self, config: Mapping[str, Any], *, timeout: float = 10.0) -> None:
        self._config = {
            "group.id": "rowbus-subscriber",
            **config,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "receive.message.max.bytes": 1_000_000_000,
        }
        self._timeout = timeout
        self._consumer: Any = None

    def open(self) -> None:
        from confluent_kafka import Consumer

        with kafka_errors("cannot create the Kafka consumer"):
            self._consumer = Consumer(self._config)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self, topic: str) -> list[int]:
        """The partitions of `topic`; KafkaClientError if it does not exist."""
        with kafka_errors(f"cannot read the metadata of {topic}"):
            meta = self._consumer.list_topics(topic, timeout=self._timeout).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise KafkaClientError(f"topic {topic} does not exist")
        return sorted(meta.partitions)

    def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(first offset, end offset) of a partition (the end is the LSO under read_committed)."""
        from confluent_kafka import TopicPartition as KafkaTP

        with kafka_errors(f"cannot read the offsets of {tp[0]}[{tp[1]}]"):
            low, high = self._consumer.get_watermark_offsets(
                KafkaTP(tp[0], tp[1]), timeout=self._timeout, cached=False
            )
        return int(low), int(high)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        from confluent_kafka import TopicPartition as KafkaTP

        with kafka_errors("cannot assign partitions"):
            self._consumer.assign([KafkaTP(t, p, o) for (t, p), o in sorted(offsets.items())])

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset the consumer will read per partition (-1001 when none yet)."""
        from confluent_kafka import TopicPartition as KafkaTP

        with kafka_errors("cannot read consumer positions"):
            got = self._consumer.position([KafkaTP(t, p) for t, p in tps])
        return {(tp.topic, tp.partition): tp.offset for tp in got}

    def consume(self, n: int, timeout: float) -> list[Message]:
        """Up to `n` messages (errors other than end-of-partition raise)."""
        from confluent_kafka import KafkaError

        with kafka_errors("cannot consume"):
            msgs: list[Message] = self._consumer.consume(n, timeout)
        out = []
        for msg in msgs:
            err = msg.error()
            if err is None:
                out.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF:
                raise KafkaClientError(f"consume failed: {err}", retryable=err.retriable())
        return out


def read_to_end(
    reader_factory: Callable[[], KafkaReader],
    topic: str,
    *,
    timeout: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[Record]:
    """Every record of a small system topic (checkpoints, schemas) up to its current end;
    [] if the topic does not exist. Bounded by `timeout`."""
    reader = reader_factory()
    reader.open()
    try:
        try:
            partitions = reader.partitions(topic)
        except KafkaClientError:
            return []
        ends = {(topic, p): reader.bounds((topic, p)) for p in partitions}
        todo = {tp: end for tp, (low, end) in ends.items() if end > low}
        reader.assign({tp: low for tp, (low, _) in ends.items()})
        out: list[Record] = []
        deadline = clock() + timeout
        while todo:
            if clock() > deadline:
                raise KafkaClientError(f"timed out after {timeout:.0f}s reading {topic}")
            for msg in reader.consume(1000, 0.2):
                where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                with contextlib.suppress(ProtocolError):  # the topic's owner reports bad records
                    out.append(decode(msg.value(), msg.headers(), where))
            for tp, position in reader.positions(list(todo)).items():
                if position >= todo[tp]:
                    del todo[tp]
        return out
    finally:
        reader.close()


def records_of(records: Sequence[Record], kind: type[Any]) -> list[Any]:
    """The records of one kind, in order."""
    return [r for r in records if isinstance(r, kind)]
