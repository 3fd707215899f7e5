"""Building blocks for shard-DDL integration tests: coordinators on real Kafka, ZooKeeper and
the sink, each on its own control topic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.spill import DataEvent
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import DdlChange, Op, RowChange
from rowbus.shard_ddl.control import ControlLog
from rowbus.shard_ddl.coordinator import Coordinator
from rowbus.shard_ddl.election import Election, ZkElection
from rowbus.shard_ddl.executor import DdlExecutor
from rowbus.shard_ddl.groups import ShardGroups
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


class SinkApply:
    """Upserts / deletes rows into the target by column name (safe to replay)."""

    def __init__(self, services: Settings, target_db: str, sub: Subscriber) -> None:
        self.conn = connect(services.resolved_sink, target_db)
        self.sub = sub
        self.rows = 0

    def __call__(self, events: Sequence[DataEvent]) -> None:
        with self.conn.cursor() as cur:
            for ev in events:
                if _definition(ev):
                    continue  # the target exists (PROTOCOL.md §9.6: a table's definition)
                assert isinstance(ev, RowChange), f"a DDL reached apply: {ev}"
                table = self.sub.table(ev)
                if ev.op is Op.DELETE:
                    cur.execute("DELETE FROM orders WHERE id=%s", (ev.image[0],))
                    continue
                names = ", ".join(f"`{c}`" for c in table.column_names)
                marks = ", ".join(["%s"] * len(table.column_names))
                cur.execute(f"REPLACE INTO orders ({names}) VALUES ({marks})", ev.after)
                self.rows += 1


def _definition(ev: DataEvent) -> bool:
    """A CREATE … IF NOT EXISTS the reader publishes before a table's first row when the stream
    has not defined it (a reader started with `snapshot: never` on existing tables)."""
    return (
        isinstance(ev, DdlChange)
        and ev.kind in (DdlKind.CREATE_DATABASE, DdlKind.CREATE_TABLE)
        and "IF NOT EXISTS" in ev.statement.upper()
    )
