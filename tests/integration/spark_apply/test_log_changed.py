"""The source stops when a partition's records below its position change (issue #33).

noida-db, restarted, can lose records it acknowledged and give their offsets to the records
written next (a reader's re-published transactions): a job that goes on from its position never
reads what is there now and holds a transaction forever. A broker restart loses records only
by timing, so the test changes the log the same way deterministically: the topic is deleted and
made again under the same name and refilled past the job's position with other records (real
broker, the source's own planning: `KafkaStreamReader.latestOffset`, no Spark)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rowbus.config import Settings
from rowbus.spark_apply.exceptions import LogChangedError
from rowbus.spark_apply.source import KafkaStreamReader, Offsets
from rowbus.waiting import wait_for


@pytest.fixture
def publish(services: Settings, unique: Callable[[str], str]) -> Iterator[Callable[..., None]]:
    """`publish(topic, tag, n)`: n committed transactions of 3 records each (the source's
    ranges end at the last stable offset, so each also leaves its commit marker in the log),
    by a transactional producer of `tag` (a topic made again has lost the producer's state:
    the broker refuses its next sequence number, so the refill is another producer's)."""
    producers: dict[str, Producer] = {}

    def publish(topic: str, tag: str, transactions: int) -> None:
        if tag not in producers:
            config = services.kafka.client_config(**{"transactional.id": unique(tag)})
            producers[tag] = Producer(config)
            producers[tag].init_transactions(15)
        producer = producers[tag]
        for t in range(transactions):
            producer.begin_transaction()
            for i in range(3):
                producer.produce(topic, value=f"{tag}-{t}-{i}".encode(), partition=0)
            producer.commit_transaction(15)

    yield publish
    for producer in producers.values():
        producer.flush(10)
    producers.clear()


def _planned(reader: KafkaStreamReader, start: Offsets, topic: str, past: int) -> Offsets:
    """The next range the source plans once the partition's end is past `past`."""
    return wait_for(
        lambda: (end := reader.latestOffset(start, ReadAllAvailable()))[topic]["0"] > past and end,
        timeout=15,
        what=f"{topic}[0] to end past {past}",
        stop_on=(LogChangedError,),
    )


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
def test_records_replaced_below_the_position_stop_the_source(
    services: Settings,
    make_topic: Callable[..., str],
    publish: Callable[..., None],
    tmp_path: Path,
    restarted: bool,
) -> None:
    """`restarted`: the source that plans the next range is a new one (a job restart) that
    finds the boundaries in its ``boundaries`` file, as the job's checkpoint folder keeps them."""
    topic = make_topic("logchanged", partitions=1)
    options = {
        "topics": topic,
        "kafka": json.dumps(services.kafka.client_config()),
        "boundaries": str(tmp_path / "boundaries.json"),
    }
    reader = KafkaStreamReader(options)
    clients: dict[str, AdminClient] = {}
    try:
        start = reader.initialOffset()
        publish(topic, "first", 3)
        first = _planned(reader, start, topic, 0)
        publish(topic, "first", 2)
        # An unchanged log is read on: the check must not stop a healthy job.
        second = _planned(reader, first, topic, first[topic]["0"])
        position = second[topic]["0"]
        if restarted:
            reader.stop()
            reader = KafkaStreamReader(options)

        admin = clients["admin"] = AdminClient(services.kafka.client_config())
        admin.delete_topics([topic], operation_timeout=10)[topic].result(15)
        wait_for(
            lambda: topic not in admin.list_topics(timeout=2).topics,
            timeout=15,
            what=f"{topic} to be deleted",
        )
        created = NewTopic(
            topic, num_partitions=1, replication_factor=1, config={"retention.ms": "-1"}
        )
        admin.create_topics([created], operation_timeout=10)[topic].result(15)
        publish(topic, "second", 8)

        with pytest.raises(LogChangedError) as raised:
            _planned(reader, second, topic, position)
        said = str(raised.value)
        assert said.startswith(f"{topic}[0]@"), said
        offset = raised.value.offset
        assert position - 16 <= offset < position, said
        assert f"the job has read to {position}" in said
        assert "\n" not in said
    finally:
        reader.stop()
        clients.clear()
