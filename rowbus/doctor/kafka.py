"""Probe the Kafka semantics rowbus relies on, against the configured broker.

Each probe uses its own fresh topic partition, so a previous run cannot make it pass.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from rowbus.clients import kafka
from rowbus.config import KafkaSettings
from rowbus.doctor.report import Check
from rowbus.waiting import wait_for

Conf = dict[str, str | int | float | bool]

# librdkafka reports the fencing the probe provokes as a fatal error; it is the expected outcome.
_EXPECTED = logging.getLogger(__name__ + ".expected")
_EXPECTED.addHandler(logging.NullHandler())
_EXPECTED.propagate = False


class KafkaProbe:
    """Owns one scratch topic with a partition per probe; `close()` deletes it."""

    PARTITIONS = 4

    def __init__(self, settings: KafkaSettings, timeout: float = 15.0) -> None:
        self.settings = settings
        self.timeout = timeout
        self.topic = f"rowbus.doctor.{uuid.uuid4().hex[:12]}"
        self.admin: Any = None

    def run(self) -> list[Check]:
        self.admin = kafka.admin(self.settings.client_config())
        try:
            self._create_topic()
        except Exception as exc:  # noqa: BLE001 - one line for any reason the broker is unusable
            return [
                Check(
                    "broker reachable, topics can be created",
                    False,
                    required=True,
                    detail=str(exc),
                    consequence="nothing can be published",
                    fix="check kafka.bootstrap_servers and that the broker runs",
                )
            ]
        probes: list[Callable[[], Check]] = [
            self.read_committed,
            self.read_committed_past_an_abort,
            self.stable_offset,
            self.end_offset,
            self.offsets_for_times,
            self.fencing,
        ]
        checks = []
        try:
            for probe in probes:
                try:
                    checks.append(probe())
                except Exception as exc:  # noqa: BLE001 - a probe that errors has failed
                    checks.append(_errored(probe.__name__, exc))
        finally:
            self._delete_topic()
        return checks

    def read_committed(self) -> Check:
        producer = kafka.producer(self._conf(**{"transactional.id": f"{self.topic}.rc"}))
        producer.init_transactions(self.timeout)
        for outcome in ("aborted", "committed"):
            producer.begin_transaction()
            for i in range(3):
                producer.produce(self.topic, f"{outcome}-{i}".encode(), partition=0)
            producer.flush(self.timeout)
            if outcome == "aborted":
                producer.abort_transaction(self.timeout)
            else:
                producer.commit_transaction(self.timeout)
        values = self._read_all(0, isolation="read_committed")
        leaked = [v for v in values if v.startswith("aborted")]
        committed = [v for v in values if v.startswith("committed")]
        ok = not leaked and len(committed) == 3
        return Check(
            "read_committed hides aborted records",
            ok,
            required=False,
            detail=f"read {len(committed)}/3 committed, {len(leaked)} aborted records",
            consequence="plain consumers see data of aborted transactions; rowbus subscribers "
            "still drop them by binlog position, third-party consumers must do the same",
            fix="use Apache Kafka or noida-db for exactly-once to third-party consumers",
        )

    def read_committed_past_an_abort(self) -> Check:
        """A read_committed consumer that starts past a producer's aborted transaction still
        gets that producer's later committed records (the apply job starts every range at the
        last one's end). noida-db lists the aborted transaction in the fetch answer anyway, and
        librdkafka then drops the producer's records until an abort marker it never sees."""
        producer = kafka.producer(self._conf(**{"transactional.id": f"{self.topic}.mid"}))
        producer.init_transactions(self.timeout)
        for outcome in ("aborted", "committed", "committed"):
            producer.begin_transaction()
            for i in range(3):
                producer.produce(self.topic, f"{outcome}-{i}".encode(), partition=3)
            producer.flush(self.timeout)
            if outcome == "aborted":
                producer.abort_transaction(self.timeout)
            else:
                producer.commit_transaction(self.timeout)
        last = self._read_offsets(3)[-3]
        values = self._read_all(3, isolation="read_committed", start=last)
        ok = len(values) == 3
        return Check(
            "read_committed from past an aborted transaction gets later committed records",
            ok,
            required=False,
            detail=f"read {len(values)}/3 committed records from offset {last}",
            consequence="a consumer that starts reading past a producer's aborted transaction "
            "misses that producer's later commits: rowbus readers write each term with an id "
            "of its own and are not hit; a third-party producer that aborts and goes on "
            "writing to rowbus topics is (docs/operations.md)",
            fix="use Apache Kafka; noida-db lists aborted transactions that ended before the "
            "fetched offset",
        )

    def stable_offset(self) -> Check:
        """The broker reports a last stable offset that an open transaction holds and its end
        releases: what `rowbus status` and the reader compare committed offsets with to find
        records read_committed consumers cannot read."""
        producer = kafka.producer(self._conf(**{"transactional.id": f"{self.topic}.lso"}))
        producer.init_transactions(self.timeout)
        producer.begin_transaction()
        producer.produce(self.topic, b"open", partition=0)
        producer.flush(self.timeout)
        tp = (self.topic, 0)
        held = kafka.stable_offsets(self.admin, [tp], self.timeout)[tp]
        end = self._end(0)
        producer.abort_transaction(self.timeout)
        released = wait_for(
            lambda: (
                (lso := kafka.stable_offsets(self.admin, [tp], self.timeout)[tp]) > held and lso
            ),
            timeout=self.timeout,
            what="the last stable offset to pass an aborted transaction",
        )
        ok = held < end and released >= end
        return Check(
            "last stable offset held by an open transaction, released by its end",
            ok,
            required=False,
            detail=f"while open: stable {held}, end {end}; after abort: stable {released}",
            consequence="a stalled read_committed partition cannot be detected",
            fix="use a broker that answers ListOffsets with isolation level read_committed",
        )

    def _end(self, partition: int) -> int:
        consumer = kafka.consumer(self._consumer_conf("read_uncommitted"))
        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=self.timeout, cached=False
            )
            return int(high)
        finally:
            consumer.close()

    def end_offset(self) -> Check:
        producer = kafka.producer(self._conf(**{"linger.ms": 200, "batch.num.messages": 1000}))
        for i in range(100):
            producer.produce(self.topic, f"r{i}".encode(), partition=1)
        producer.flush(self.timeout)
        consumer = kafka.consumer(self._consumer_conf("read_uncommitted"))
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.topic, 1), timeout=self.timeout, cached=False
            )
        finally:
            consumer.close()
        offsets = self._read_offsets(1)
        expected = offsets[-1] + 1 if offsets else None
        ok = len(offsets) == 100 and high == expected and high - low == 100
        return Check(
            "end offset after a 100-record batch",
            ok,
            required=True,
            detail=f"{len(offsets)} records, last offset {offsets[-1] if offsets else '-'}, "
            f"end offset {high} (expected {expected})",
            consequence="checkpoint offsets and Spark offset ranges would skip or repeat records",
            fix="use a broker whose end offsets count every record (Apache Kafka, noida-db)",
        )

    def offsets_for_times(self) -> Check:
        producer = kafka.producer(self._conf())
        base = int(time.time() * 1000) - 60_000
        for i in range(3):
            producer.produce(self.topic, f"t{i}".encode(), partition=2, timestamp=base + i * 1000)
        producer.flush(self.timeout)
        consumer = kafka.consumer(self._consumer_conf("read_uncommitted"))
        try:
            low, _ = consumer.get_watermark_offsets(
                TopicPartition(self.topic, 2), timeout=self.timeout, cached=False
            )
            mid = consumer.offsets_for_times(
                [TopicPartition(self.topic, 2, base + 500)], timeout=self.timeout
            )[0].offset
            past = consumer.offsets_for_times(
                [TopicPartition(self.topic, 2, base + 3_600_000)], timeout=self.timeout
            )[0].offset
        finally:
            consumer.close()
        ok = mid == low + 1 and past < 0
        return Check(
            "offsets_for_times (inside the log and past its end)",
            ok,
            required=True,
            detail=f"inside: {mid} (expected {low + 1}); past the end: {past} (expected -1, "
            "meaning the end)",
            consequence="starting a subscriber or reader index from a timestamp lands on the "
            "wrong record",
            fix="use a broker with a correct time index (Apache Kafka, noida-db)",
        )

    def fencing(self) -> Check:
        tid = f"{self.topic}.fence"
        first = kafka.producer(self._conf(**{"transactional.id": tid}), logger=_EXPECTED)
        first.init_transactions(self.timeout)
        first.begin_transaction()
        first.produce(self.topic, b"zombie", partition=0)
        first.flush(self.timeout)
        second = kafka.producer(self._conf(**{"transactional.id": tid}))
        second.init_transactions(self.timeout)
        fenced_error = ""
        try:
            first.produce(self.topic, b"zombie-2", partition=0)
            first.commit_transaction(self.timeout)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            fenced_error = err.name()
        second.begin_transaction()
        second.produce(self.topic, b"successor", partition=0)
        second.commit_transaction(self.timeout)
        values = self._read_all(0, isolation="read_committed")
        leaked = "zombie" in values or "zombie-2" in values
        if not fenced_error:
            detail = "the first producer committed after being replaced"
        elif leaked:
            detail = (
                f"the first producer was fenced ({fenced_error}) but read_committed "
                "consumers still see its records"
            )
        else:
            detail = f"the first producer's commit failed with {fenced_error}"
        return Check(
            "a second producer with the same transactional.id fences the first",
            bool(fenced_error) and not leaked,
            required=True,
            detail=detail,
            consequence="a stale reader could publish duplicates next to its successor",
            fix="use a broker that implements producer epochs (Apache Kafka, noida-db)",
        )

    def _read_all(self, partition: int, isolation: str, start: int | None = None) -> list[str]:
        return [value.decode() for _, value in self._read(partition, isolation, start)]

    def _read_offsets(self, partition: int) -> list[int]:
        return [offset for offset, _ in self._read(partition, "read_uncommitted")]

    def _read(
        self, partition: int, isolation: str, start: int | None = None
    ) -> list[tuple[int, bytes]]:
        consumer = kafka.consumer(self._consumer_conf(isolation))
        tp = TopicPartition(self.topic, partition)
        try:
            _, high = consumer.get_watermark_offsets(tp, timeout=self.timeout, cached=False)
            first = OFFSET_BEGINNING if start is None else start
            consumer.assign([TopicPartition(self.topic, partition, first)])
            out: list[tuple[int, bytes]] = []

            def drained() -> bool:
                for msg in consumer.consume(500, timeout=0.2):
                    error = msg.error()
                    if error is None:
                        out.append((msg.offset() or 0, msg.value() or b""))
                    elif error.code() == KafkaError._PARTITION_EOF:
                        return True
                pos = consumer.position([tp])[0].offset
                return bool(pos >= high)

            wait_for(drained, timeout=self.timeout, what=f"{self.topic}[{partition}] to be read")
            return out
        finally:
            consumer.close()

    def _conf(self, **extra: Any) -> Conf:
        return self.settings.client_config(**extra)

    def _consumer_conf(self, isolation: str) -> Conf:
        return self._conf(
            **{
                "group.id": f"{self.topic}.probe",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "enable.partition.eof": True,
                "receive.message.max.bytes": 200_000_000,
            }
        )

    def _create_topic(self) -> None:
        assert self.admin is not None
        futures = self.admin.create_topics(
            [
                NewTopic(
                    self.topic,
                    num_partitions=self.PARTITIONS,
                    replication_factor=1,
                    config={"retention.ms": "-1"},
                )
            ],
            operation_timeout=self.timeout,
            request_timeout=self.timeout,
        )
        futures[self.topic].result(self.timeout)

        def visible() -> bool:
            assert self.admin is not None
            md = self.admin.list_topics(self.topic, timeout=2).topics.get(self.topic)
            return md is not None and md.error is None and len(md.partitions) == self.PARTITIONS

        wait_for(visible, timeout=self.timeout, what=f"topic {self.topic} to appear")

    def _delete_topic(self) -> None:
        assert self.admin is not None
        # Cleanup of a scratch topic is best effort.
        with contextlib.suppress(Exception):
            self.admin.delete_topics([self.topic], operation_timeout=5)[self.topic].result(10)


def _errored(name: str, exc: Exception) -> Check:
    return Check(
        f"probe {name}",
        False,
        required=True,
        detail=f"{type(exc).__name__}: {exc}",
        consequence="the broker does not support what rowbus needs here",
        fix="see the error; the probe could not complete",
    )
