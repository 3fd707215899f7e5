"""`source.read_range` with the process's kept consumers (`consumers_kept`), on the real broker:
consecutive ranges, a range a little ahead, one behind and an abandoned read each give exactly
the records a fresh consumer gives, and the kept consumer is reused only where it may be."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from rowbus.config import Settings
from rowbus.protocol.codec import encode
from rowbus.protocol.events import Resolved
from rowbus.spark_apply import source
from rowbus.spark_apply.consumers_kept import IDLE_S, QUEUED_MIN, RECENT, SKIP, KeptConsumers
from rowbus.spark_apply.source import KafkaRange, read_range
from rowbus.waiting import wait_for

TXNS, PER_TXN = 3, 4_000
"""12,000 records in three transactions: more than a consume's chunk (5,000), and commit
markers inside the log (offsets no record is delivered for)."""


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeptConsumers]:
    pool = KeptConsumers(source._consumer)
    monkeypatch.setattr(source, "_KEPT", pool)
    yield pool
    pool.close()  # the session checks that no Kafka client of the test process is left open


@pytest.fixture
def topic(services: Settings, make_topic: Callable[..., str], unique: Callable[[str], str]) -> str:
    name = make_topic("kept", partitions=1)
    producer = Producer(services.kafka.client_config(**{"transactional.id": unique("kept")}))
    producer.init_transactions(15)
    for t in range(TXNS):
        producer.begin_transaction()
        for i in range(PER_TXN):
            value, headers = encode(Resolved(source="s1", ts=t * PER_TXN + i + 1))
            producer.produce(name, value, partition=0, headers=list(headers))
        producer.commit_transaction(30)
    producer.flush(10)
    return name


def test_ranges_read_by_kept_consumers_equal_a_fresh_read(
    services: Settings, topic: str, kept: KeptConsumers
) -> None:
    kafka = services.kafka.client_config()

    def offsets(start: int, end: int) -> list[int]:
        return [
            o
            for cols in read_range(kafka, KafkaRange(topic, 0, start, end))
            for o in cols["offset"]
        ]

    end = TXNS * (PER_TXN + 1)  # each transaction's records and its commit marker
    whole = offsets(0, end)
    assert len(whole) == TXNS * PER_TXN and len(kept) == 1
    kept.close()

    # Consecutive ranges, one cut at a commit marker's offset: one consumer for all three.
    assert offsets(0, 3_000) + offsets(3_000, PER_TXN) + offsets(PER_TXN, end) == whole
    (first,) = kept._kept.values()
    consumer = first.consumer
    assert first.position == end and len(kept) == 1

    # A range a little ahead of where the kept consumer stands: read on, the gap dropped.
    kept.close()
    assert offsets(0, 1_000) + offsets(1_000 + SKIP // 4, end) == [
        o for o in whole if o < 1_000 or o >= 1_000 + SKIP // 4
    ]
    consumer = next(iter(kept._kept.values())).consumer

    # Behind it, among the last RECENT messages it delivered (the held rows a throughput
    # batch reads again): the same consumer, those messages again, then on.
    assert offsets(0, end) == whole
    consumer = next(iter(kept._kept.values())).consumer
    assert RECENT > 3_000
    assert offsets(end - 3_000, end) == [o for o in whole if o >= end - 3_000]
    assert next(iter(kept._kept.values())).consumer is consumer

    # Further behind: a new consumer, the same records.
    assert offsets(2_000, 7_000) == [o for o in whole if 2_000 <= o < 7_000]
    assert next(iter(kept._kept.values())).consumer is not consumer
    # ... and behind that one's read again, across the end of what it delivered.
    consumer = next(iter(kept._kept.values())).consumer
    assert offsets(6_000, 9_000) == [o for o in whole if 6_000 <= o < 9_000]
    assert next(iter(kept._kept.values())).consumer is consumer

    # A read abandoned after its first chunk leaves no consumer behind (its position is
    # unknown), and the next read of that start is whole.
    chunks = read_range(kafka, KafkaRange(topic, 0, 7_000, end))
    next(chunks)
    chunks.close()
    assert len(kept) == 0
    assert offsets(7_000, end) == [o for o in whole if o >= 7_000]


def test_a_caught_up_kept_consumer_is_unassigned_and_reads_on_where_it_stood(
    services: Settings, topic: str, kept: KeptConsumers, unique: Callable[[str], str]
) -> None:
    """A consumer given back near the partition's end stops fetching by being unassigned, not
    paused: librdkafka fetched a resumed partition only after 0.5-0.9 s, which every batch of
    a caught-up streaming job paid. Assigned again, it reads on from the last message it
    delivered (one consumed past the read's end included), nothing lost or repeated."""
    kafka = services.kafka.client_config()

    def offsets(start: int, end: int) -> list[int]:
        return [
            o
            for cols in read_range(kafka, KafkaRange(topic, 0, start, end))
            for o in cols["offset"]
        ]

    end = TXNS * (PER_TXN + 1)
    cut = end - 1_000  # within QUEUED_MIN of the end: a consume delivers some past the cut
    first = offsets(0, cut)
    (stood,) = kept._kept.values()
    assert stood.paused and stood.pending, "stopped while idle, with messages past its end"
    assert stood.consumer.assignment() == []
    producer = Producer(services.kafka.client_config(**{"transactional.id": unique("more")}))
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(PER_TXN):
        value, headers = encode(Resolved(source="s1", ts=end + i + 1))
        producer.produce(topic, value, partition=0, headers=list(headers))
    producer.commit_transaction(30)
    producer.flush(10)
    new_end = end + PER_TXN + 1
    rest = offsets(cut, new_end)
    assert next(iter(kept._kept.values())).consumer is stood.consumer
    kept.close()
    assert first + rest == offsets(0, new_end)
    assert len(first + rest) == (TXNS + 1) * PER_TXN


def test_a_kept_consumer_that_delivered_near_the_end_stops_fetching_once_idle(
    services: Settings, topic: str, kept: KeptConsumers
) -> None:
    """A read ending far before the partition's end whose consume delivered past its end
    (into `pending`) up to near it: librdkafka's own queue then holds fewer than
    ``queued.min.messages``, so it fetches again, and noida-db answers a fetch at the end at
    once — an idle worker fetched in a loop (2026-11-27: 58,653 TCP segments a second from one
    Python worker, 14% of a core in the broker, while a throttled sink kept the job waiting).
    Such a consumer is unassigned once idle for `IDLE_S` (decided by what it delivered,
    `Kept.resume_at`, in offsets twice `QUEUED_MIN`); taken again before that, it reads on
    assigned, so a busy job pays no new fetch. The records read are the same either way."""
    kafka = services.kafka.client_config()
    end = TXNS * (PER_TXN + 1)
    cut = end - 11_000

    def offsets(start: int, stop: int) -> list[int]:
        return [
            o
            for cols in read_range(kafka, KafkaRange(topic, 0, start, stop))
            for o in cols["offset"]
        ]

    got = offsets(0, cut)
    assert got == list(range(cut))
    (stood,) = kept._kept.values()
    assert end - stood.position >= 2 * QUEUED_MIN
    assert end - stood.resume_at() < 2 * QUEUED_MIN, "a consume delivered well past the end"
    assert not stood.paused, "not stopped at once: a busy job takes it again"
    began = time.monotonic()
    wait_for(lambda: stood.paused, timeout=10 * IDLE_S, what="the idle consumer stopped")
    assert time.monotonic() - began >= IDLE_S / 2
    assert stood.consumer.assignment() == []
    # Assigned again where it stood, it reads on; the records are a fresh read's.
    rest = offsets(cut, end - 500)
    assert got + rest == [o for o in range(end - 500) if (o + 1) % (PER_TXN + 1)]
    assert next(iter(kept._kept.values())).consumer is stood.consumer
