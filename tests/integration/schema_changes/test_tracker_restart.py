"""The shadow schema survives a reader restart: a stopped reader's table states are stored with
its checkpoint, so DDLs run while it is down (the live server already past all of them when it
comes back) still get their own after-schemas, and the rebuilt table equals the source."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.schema_changes.rebuild import Rebuild
from tests.integration.schema_changes.test_matrix import compare, source_tables

BEFORE = [
    "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT 1) DEFAULT CHARSET=latin1",
    "INSERT INTO t (id) VALUES (1)",
]
WHILE_DOWN = [
    "ALTER TABLE t ADD COLUMN b INT NOT NULL DEFAULT 2",
    "ALTER TABLE t MODIFY b BIGINT NOT NULL",
    "ALTER TABLE t ALTER COLUMN a SET DEFAULT 9, ADD COLUMN c VARCHAR(3) DEFAULT 'cc'",
    "ALTER TABLE t ALTER COLUMN c SET DEFAULT 'zz'",
    "INSERT INTO t (id, b) VALUES (2, 5)",
]


def _checkpoints(services: Settings, topic: str, at_least: int) -> None:
    index = TopicReader(services, topic)
    index.until(
        lambda rs: sum(isinstance(r, ReaderCheckpoint) for r in rs) >= at_least,
        timeout=60,
        what=f"{at_least} reader checkpoints",
    )
    index.close()


def test_table_states_survive_a_reader_restart(
    services: Settings, make_topic: Any, make_database: Any
) -> None:
    server = services.sources[1]
    db = make_database(server)
    source = make_topic("restart-src", partitions=2)
    checkpoints = make_topic("restart-ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("restart-schemas", partitions=1, **{"cleanup.policy": "compact"})
    setup = ReaderSetup(
        services=services,
        server=server,
        source=source,
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
    )
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        for sql in BEFORE:
            cur.execute(sql)
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    with reader_thread(setup, start=f"file:{file}:{pos}", heartbeat_interval_s=0.3) as reader:
        wait_for(
            lambda: (
                reader.committed is not None
                and (reader.committed.file, reader.committed.offset) >= end
            ),
            timeout=60,
            interval=0.1,
            what="the first reader past the CREATE TABLE",
        )
    with connect(server, db) as conn, conn.cursor() as cur:
        for sql in WHILE_DOWN:
            cur.execute(sql)
    expected = source_tables(server, [db])
    rebuilt = Rebuild()
    with ExitStack() as stack:
        stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
        _checkpoints(services, checkpoints, 1)
        sub = stack.enter_context(
            Subscriber(
                services.kafka.client_config(),
                [source],
                checkpoints_topic=checkpoints,
                schemas_topic=schemas,
                group_id=f"restart-{source}",
                topic_template="{source}",
            )
        )

        def equal() -> bool:
            for txn in sub.poll(0.2):
                for ev in txn.events:
                    if isinstance(ev, RowChange):
                        rebuilt.apply(ev, sub.table(ev))
                    elif isinstance(ev, DdlChange):
                        rebuilt.apply(ev, None)
            return compare(rebuilt, expected) == {}

        try:
            wait_for(equal, timeout=60, interval=0.1, what="the restarted reader's rebuild")
        except Exception:
            raise AssertionError(compare(rebuilt, expected)) from None
