"""One smoke test per service, proving each is real and behaves as rowbus needs."""

from __future__ import annotations

import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kazoo.client import KazooClient
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from rowbus.config import Settings
from rowbus.waiting import wait_for
from tests.conftest import connect


def test_kafka_transactions_abort_and_commit_read_committed(services: Settings, make_topic):
    topic = make_topic("smoke", partitions=1)
    producer = Producer(services.kafka.client_config(**{"transactional.id": topic}))
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(15)
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(15)

    consumer = Consumer(
        services.kafka.client_config(
            **{
                "group.id": topic,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "enable.auto.commit": False,
            }
        )
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen: list[bytes] = []

    def at_end() -> bool:
        for msg in consumer.consume(10, timeout=0.2):
            if msg.error() is None:
                seen.append(msg.value())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                return True
        return False

    wait_for(at_end, timeout=20, what=f"the end of {topic}")
    consumer.close()
    assert seen == [b"committed"]


def test_binlog_row_event_from_a_source(services: Settings, make_database):
    source = services.sources[0]
    db = make_database(source)
    with connect(source, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("SHOW MASTER STATUS")
        log_file, log_pos = cur.fetchone()[:2]
        cur.execute("INSERT INTO t VALUES (42, 'smoke')")
    stream = BinLogStreamReader(
        connection_settings={
            "host": source.host,
            "port": source.port,
            "user": source.user,
            "password": source.password.get_secret_value(),
        },
        server_id=900_000 + uuid.uuid4().int % 1000,
        log_file=log_file,
        log_pos=log_pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent],
        only_schemas=[db],
    )
    try:
        rows = [row["values"] for event in stream for row in event.rows if event.table == "t"]
    finally:
        stream.close()
    assert rows == [{"id": 42, "name": "smoke"}]


def test_zookeeper_ephemeral_node_vanishes_with_its_session(services: Settings, unique):
    path = f"/rowbus-test/{unique('ephemeral')}"
    owner = KazooClient(hosts=services.zookeeper.hosts, timeout=10)
    watcher = KazooClient(hosts=services.zookeeper.hosts, timeout=10)
    owner.start(timeout=15)
    watcher.start(timeout=15)
    try:
        owner.create(path, b"alive", ephemeral=True, makepath=True)
        assert watcher.exists(path) is not None
        owner.stop()
        owner.close()
        wait_for(
            lambda: watcher.exists(path) is None,
            timeout=15,
            what=f"ephemeral node {path} to vanish",
        )
    finally:
        watcher.stop()
        watcher.close()
