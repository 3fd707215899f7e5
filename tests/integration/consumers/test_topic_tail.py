"""`TopicTail` on the real broker: between catch-ups it does not fetch, and nothing is lost or
repeated across its pauses (catch-up after catch-up, a poll after a catch-up, a poll after a
poll); a poll pauses it again."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rowbus.clients import kafka
from rowbus.config import Settings
from rowbus.waiting import wait_for


def _values(msgs: list[kafka.Message]) -> list[bytes]:
    return sorted(m.value() or b"" for m in msgs)


def _fetch_requests(stats: list[str]) -> int:
    brokers = json.loads(stats[-1])["brokers"].values()
    return sum(b.get("req", {}).get("Fetch", 0) for b in brokers)


def _assert_idle(reader: Any, stats: list[str]) -> None:
    reader.consume(1, 0.3)
    before = _fetch_requests(stats)
    assert reader.consume(1, 1.0) == []
    assert _fetch_requests(stats) - before <= 2


def test_an_idle_tail_does_not_fetch_and_reads_on_after_its_pause(
    services: Settings, make_topic: Callable[..., str]
) -> None:
    topic = make_topic("tail", partitions=2)
    config = services.kafka.client_config()
    producer = kafka.producer(config)

    def produce(*values: bytes) -> None:
        for i, v in enumerate(values):
            producer.produce(topic, v, partition=i % 2)
        producer.flush(15)

    stats: list[str] = []
    tail = kafka.TopicTail(
        {**config, "group.id": "tail", "statistics.interval.ms": 100, "stats_cb": stats.append},
        topic,
    )
    try:
        produce(b"a", b"b", b"c")
        assert _values(tail.catch_up(30)) == [b"a", b"b", b"c"]

        # Stopped: serving the client's callbacks (a consume of nothing) shows no fetch sent.
        # (Left fetching, noida-db answered ~17k fetches a second of an idle consumer.)
        reader: Any = tail._reader  # the tail's consumer, to serve callbacks without resuming
        _assert_idle(reader, stats)

        produce(b"d", b"e")
        assert _values(tail.catch_up(30)) == [b"d", b"e"]
        produce(b"f")
        got: list[bytes] = []

        def polled() -> bool:
            got.extend(_values(tail.poll(0.2)))
            return b"f" in got

        wait_for(
            polled,
            timeout=30,
            what="the poll after a catch-up to get the new message",
        )
        assert got == [b"f"]
        assert tail.catch_up(30) == []

        # A poll leaves it paused as well: the shard-DDL coordinator polls its control log once
        # a batch, and a tail left fetching kept noida-db answering ~10k fetches a second.
        _assert_idle(reader, stats)
        # ... and a poll that waits for nothing still returns what is on the broker.
        produce(b"g", b"h")
        assert _values(tail.poll(0.0)) == [b"g", b"h"]
    finally:
        tail.close()
        kafka.close_producer(producer)
