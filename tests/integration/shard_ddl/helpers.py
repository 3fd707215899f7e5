"""Building blocks for shard-DDL integration tests: coordinators on real Kafka, ZooKeeper and
the sink, each on its own control topic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.shard_ddl.control import ControlLog
from rowbus.consumers.shard_ddl.coordinator import Coordinator
from rowbus.consumers.shard_ddl.election import Election, ZkElection
from rowbus.consumers.shard_ddl.executor import DdlExecutor
from rowbus.consumers.shard_ddl.groups import ShardGroups
from tests.conftest import connect


def sink_connector(server: MySQLSettings) -> Callable[[], Any]:
    return lambda: connect(server)


def executor(services: Settings, state_db: str) -> DdlExecutor:
    return DdlExecutor(sink_connector(services.resolved_sink), state_database=state_db)


def election(services: Settings, name: str, identifier: str) -> ZkElection:
    assert services.zookeeper.hosts is not None
    return ZkElection(services.zookeeper.hosts, identifier, name=name, root="/rowbus-test").start()


def coordinator(
    services: Settings,
    topic: str,
    actor: str,
    groups: ShardGroups,
    *,
    execute: DdlExecutor | None = None,
    elect: Election | None = None,
    optimistic: bool = False,
) -> Coordinator:
    log = ControlLog(services.kafka.client_config(), topic)
    return Coordinator(
        log, actor=actor, groups=groups, executor=execute, election=elect, optimistic=optimistic
    ).start()


def columns(server: MySQLSettings, db: str, table: str) -> list[tuple[str, str]]:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        return [(str(n), str(t)) for n, t in cur.fetchall()]


def readers_ready(services: Settings, topics: list[str]) -> None:
    """Wait until every reader published something (a heartbeat once it is tailing), so writes
    made after this are seen by readers started at ``latest``."""
    from confluent_kafka import Consumer, TopicPartition

    from rowbus.waiting import wait_for

    consumer = Consumer(services.kafka.client_config(**{"group.id": "readiness"}))
    try:
        for topic in topics:
            wait_for(
                lambda t=topic: (
                    consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=5)[1] > 0
                ),
                timeout=60,
                what=f"the reader of {topic} to publish",
            )
    finally:
        consumer.close()
