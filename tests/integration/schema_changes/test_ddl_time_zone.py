"""A DDL runs downstream in its source session's time zone (protocol 1.5, PROTOCOL.md §1.3).

A session at ``+05:30`` (and one at a named zone resolved by the source) adds a DATETIME
column with ``DEFAULT CURRENT_TIMESTAMP`` to a table that holds rows, and a TIMESTAMP column
whose DEFAULT is a time literal: the rows already there take the statement's moment in that
zone, and the literal is an instant of that zone. The real reader publishes the DDL with the
session's offset, and the Spark apply job runs it so: the sink's rows and columns (read on
connections of one zone) equal the source's. Before 1.5 the sink ran the DDL in its own
connection's zone: the old rows were 5 h 30 off and the TIMESTAMP default another instant.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.ddl import TableName
from rowbus.protocol.events import DdlChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.schema_changes.test_matrix import apply_until_equal, source_tables
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

STATEMENTS = [
    "CREATE TABLE zone (id INT PRIMARY KEY, a INT)",
    "INSERT INTO zone VALUES (1, 10), (2, 20)",
    "SET SESSION time_zone = '+05:30', TIMESTAMP = 1700000000",
    "ALTER TABLE zone ADD COLUMN d DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP, "
    "ADD COLUMN t TIMESTAMP NULL DEFAULT '2020-07-01 00:00:00'",
    "INSERT INTO zone (id, a) VALUES (3, 30)",
    "SET SESSION time_zone = '-03:00', TIMESTAMP = 1700000600",
    "ALTER TABLE zone ADD COLUMN e DATETIME(6) NOT NULL DEFAULT NOW(6)",
    "SET SESSION time_zone = 'SYSTEM', TIMESTAMP = 1700001200",
    "ALTER TABLE zone ADD COLUMN f DATETIME NULL DEFAULT CURRENT_TIMESTAMP",
    "SET SESSION time_zone = DEFAULT, TIMESTAMP = DEFAULT",
    "UPDATE zone SET a = a + 1 WHERE id = 2",
]


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def test_a_ddl_runs_in_its_sessions_time_zone_through_the_reader_and_spark(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    db = make_database(server)
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    setup = ReaderSetup(
        services=services,
        server=server,
        source=make_topic("src", partitions=2),
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
    )
    job = unique("job")
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
            wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a heartbeat")
            with connect(server, db) as conn, conn.cursor() as cur:
                for sql in STATEMENTS:
                    cur.execute(sql)
            expected = source_tables(server, [db])
            rows = expected[TableName(db, "zone")][1]
            # the source's own truth: 1700000000 is 2023-11-15 03:43:20 at +05:30
            assert str(rows[0]["d"]) == "2023-11-15 03:43:20"

            data = TopicReader(services, setup.source)
            published = data.until(
                lambda rs: len({r.position for r in rs if isinstance(r, DdlChange)}) >= 4,
                timeout=60,
                what="the four DDLs",
            )
            data.close()
            with connect(server) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = 'SYSTEM', TIMESTAMP = 1700001200")
                cur.execute("SELECT TIME_FORMAT(TIMEDIFF(NOW(), UTC_TIMESTAMP()), '%H:%i')")
                (system,) = cur.fetchone() or ("",)
            system = system if str(system).startswith("-") else f"+{system}"
            # (a DDL goes to every partition: one copy each)
            ddls = {r.position: r for r in published if isinstance(r, DdlChange)}
            zones = [
                r.time_zone
                for _, r in sorted(ddls.items(), key=lambda kv: (kv[0].file, kv[0].offset))
            ]
            # SYSTEM is the source machine's zone, which only the source can resolve
            # the CREATE used no zone: its event has none (PROTOCOL.md §1.3)
            assert zones == [None, "+05:30", "-03:00", system], zones

            config = job_config(
                services, job, [setup.source], schemas, [], tmp_path / "cp", unrouted="identity"
            )
            assert apply_until_equal(spark, config, services, [db], expected) == expected
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in (db, f"state_{job}"):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
