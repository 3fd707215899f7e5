"""The reader makes its topics itself, with the configured partitions and settings, and reports
an existing topic that differs; two deployments reading sources of the same name never fence
each other."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from rowbus.protocol.events import Resolved, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def _describe(setup: ReaderSetup, topic: str) -> tuple[int, dict[str, str]]:
    admin = AdminClient(setup.services.kafka.client_config())
    meta = admin.list_topics(timeout=10).topics[topic]
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return len(meta.partitions), {k: v.value for k, v in future.result(10).items()}


def test_the_reader_creates_its_topics_as_configured(reader_setup: ReaderSetup, unique) -> None:
    prefix = unique("test.made").replace("_", ".")
    setup = dataclasses.replace(
        reader_setup,
        data_topic=f"{prefix}.data.{{source}}",
        checkpoints_topic=f"{prefix}.ckpt",
        schemas_topic=f"{prefix}.schemas",
    )
    topic = setup.data_topic.format(source=setup.source)
    admin = AdminClient(setup.services.kafka.client_config())
    with reader_thread(setup, partitions=5):
        # Listing every topic never creates one (asking by name would, on this broker).
        wait_for(
            lambda: topic in admin.list_topics(timeout=10).topics,
            timeout=120,
            what="the reader to create its data topic",
        )
        data = TopicReader(setup.services, topic)
        data.until(lambda rs: any(isinstance(r, Resolved) for r in rs), 120, "a first Resolved")
        data.close()
    partitions, config = _describe(setup, setup.data_topic.format(source=setup.source))
    assert partitions == 5, "reader.partitions, not the broker's auto-creation default"
    assert config["retention.ms"] == "-1"
    partitions, config = _describe(setup, setup.checkpoints_topic)
    assert (partitions, config["cleanup.policy"]) == (1, "compact")
    partitions, config = _describe(setup, setup.schemas_topic)
    assert (partitions, config["cleanup.policy"]) == (1, "compact")


def test_an_existing_topic_that_differs_is_reported(
    reader_setup: ReaderSetup, make_topic, caplog: pytest.LogCaptureFixture
) -> None:
    odd = make_topic("odd", partitions=1)  # 1 partition, no compaction
    setup = dataclasses.replace(reader_setup, checkpoints_topic=odd)
    with caplog.at_level(logging.WARNING), reader_thread(setup, partitions=3):
        data = TopicReader(setup.services, setup.data_topic)
        data.until(lambda rs: any(isinstance(r, Resolved) for r in rs), 120, "a first Resolved")
        data.close()
    lines = [r.getMessage() for r in caplog.records if odd in r.getMessage()]
    assert any(
        "has cleanup.policy=delete where rowbus needs cleanup.policy=compact" in ln for ln in lines
    ), lines


def test_two_deployments_of_one_source_name_do_not_fence_each_other(
    reader_setup: ReaderSetup, make_topic
) -> None:
    first = reader_setup
    second = dataclasses.replace(
        first,
        data_topic=make_topic("data2", partitions=3),
        checkpoints_topic=make_topic("ckpt2", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas2", partitions=1, **{"cleanup.policy": "compact"}),
    )
    with reader_thread(first) as a, reader_thread(second) as b:
        assert a.transactional_id != b.transactional_id
        readers = [TopicReader(s.services, s.data_topic) for s in (first, second)]
        for r in readers:
            r.until(lambda rs: any(isinstance(x, Resolved) for x in rs), 120, "a first Resolved")
        with connect(first.server, first.database) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            cur.executemany("INSERT INTO t VALUES (%s)", [(i,) for i in range(40)])
            conn.commit()
        for r in readers:
            r.until(lambda rs: sum(isinstance(x, RowChange) for x in rs) >= 40, 120, "40 rows")
            r.close()
    # Leaving the context re-raises a reader's error: neither was fenced.
