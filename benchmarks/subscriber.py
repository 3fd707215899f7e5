"""The Subscriber end to end on a real broker: ``python -m benchmarks.merger subscriber``.

Publishes W1-shaped transactions (10 columns, 100 rows each) of two sources to two fresh
topics of three partitions, each transaction followed by a `Resolved` broadcast, then times:

- the `Subscriber` reading them all (fetch, decode, merge, release, iterate every row, one
  checkpoint per polled batch, as `run` saves it);
- the `Merger` alone on the same records, already decoded, in the same process right after.

The ratio says what fetching and decoding cost on top of the merge. Both figures are records/s
(rows plus watermarks); the machine's load moves them, so compare ratios from one run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchmarks.merger import w1_stream
from rowbus.clients import kafka
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.merger import Merger
from rowbus.protocol.codec import encode
from rowbus.protocol.events import Event


@dataclass(frozen=True)
class Figures:
    records: int
    rows: int
    subscriber_s: float
    merger_s: float

    @property
    def subscriber_rate(self) -> float:
        return self.records / self.subscriber_s

    @property
    def merger_rate(self) -> float:
        return self.records / self.merger_s

    def __str__(self) -> str:
        return (
            f"subscriber: {self.records} records ({self.rows} rows) in {self.subscriber_s:.2f}s "
            f"= {self.subscriber_rate:,.0f} records/s; merger alone: {self.merger_rate:,.0f} "
            f"records/s; subscriber/merger = {self.subscriber_rate / self.merger_rate:.2f}"
        )


def _create_topics(config: dict[str, Any], names: Iterable[str], partitions: int) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = kafka.admin(config)
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
    )
    for future in futures.values():
        future.result(30)


def _delete_topics(config: dict[str, Any], names: list[str]) -> None:

    admin = kafka.admin(config)
    for future in admin.delete_topics(names).values():
        future.result(30)


def _publish(config: dict[str, Any], records: list[tuple[str, int, Event]]) -> None:

    producer = kafka.producer({**config, "linger.ms": 20, "batch.num.messages": 10_000})
    for topic, partition, event in records:
        value, headers = encode(event)
        while True:
            try:
                producer.produce(topic, value, partition=partition, headers=list(headers))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("the benchmark's records were not all delivered within 60 s")


def bench_subscriber(
    bootstrap_servers: str, events: int, *, sources: int = 2, partitions: int = 3, rows: int = 100
) -> Figures:
    """Publish about `events` records, read them through the Subscriber, then the merger."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers}
    run = uuid.uuid4().hex[:8]
    txns = max(1, events // (sources * (rows + partitions)))
    prefix = f"bench.{run}."
    data = list(w1_stream(sources, partitions, txns, rows, prefix=prefix))
    topics = [f"{prefix}s{s}" for s in range(sources)]
    system = [f"{prefix}checkpoints", f"{prefix}schemas"]
    _create_topics(config, topics, partitions)
    _create_topics(config, system, 1)
    try:
        _publish(config, data)
        total_rows = sources * txns * rows
        subscriber_s = _time_subscriber(config, topics, total_rows, system)
        merger_s = _time_merger(data, sources, partitions, prefix)
    finally:
        _delete_topics(config, topics + system)
    return Figures(len(data), total_rows, subscriber_s, merger_s)


def _time_subscriber(
    config: dict[str, Any], topics: list[str], total_rows: int, system: list[str]
) -> float:
    seen = 0
    sub = Subscriber(
        config,
        topics,
        store=MemoryCheckpointStore(),
        sources=topics,
        topic_template="{source}",
        checkpoints_topic=system[0],
        schemas_topic=system[1],
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        memory_limit=None,
        batch_size=10_000,
    )
    with sub:
        start = time.perf_counter()
        deadline = start + 600
        while seen < total_rows:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the subscriber read {seen} of {total_rows} rows in 600 s")
            batch = sub.poll(0.2)
            for txn in batch:
                seen += sum(1 for _ in txn.events)
            if batch:
                sub.commit(batch[-1])
        return time.perf_counter() - start


def _time_merger(
    data: list[tuple[str, int, Event]], sources: int, partitions: int, prefix: str
) -> float:
    lanes = [
        (f"{prefix}s{s}", p, f"{prefix}s{s}") for s in range(sources) for p in range(partitions)
    ]
    merger = Merger(lanes)
    offsets: dict[tuple[str, int], int] = {}
    start = time.perf_counter()
    batch: list[Any] = []
    for n, (topic, partition, event) in enumerate(data):
        offset = offsets.get((topic, partition), 0)
        offsets[topic, partition] = offset + 1
        merger.push(topic, partition, offset, event)
        if n % 10_000 == 9_999:
            batch = merger.release()
            for txn in batch:
                sum(1 for _ in txn.events)
            if batch:
                batch[-1].checkpoint  # noqa: B018 - what the subscriber saves per batch
    for txn in merger.release():
        sum(1 for _ in txn.events)
    return time.perf_counter() - start
