"""Keys that differ in bytes but are one key to the sink's collation ('c'/'C', 'a'/'a ',
'é'/'e'), through a real source, a real reader, the broker and the apply job
(``available_now``) in both modes, compared with the source row for row (issue 31: parallel
mode lost rows C and D without an error; a unique value moved by case failed in any mode)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Heartbeat, ReaderCheckpoint, Resolved, RowChange
from rowbus.spark_apply.job import BatchApplier, await_query, start_query
from rowbus.verify import verify
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

KEYS = (
    {
        # The table: general_ci, the default kind of collation.
        "ci": "CREATE TABLE ci (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        # PAD SPACE and accents: 'a' = 'A' = 'a ' and 'é' = 'e' under unicode_ci.
        "pad": "CREATE TABLE pad (k VARCHAR(10) COLLATE utf8mb4_unicode_ci PRIMARY KEY, v INT)",
    },
    # Rows the sink holds before the step under test (a DDL cuts the steps after them).
    ["INSERT INTO ci VALUES ('A', 1), ('E', 1)", "INSERT INTO pad VALUES ('z', 1)"],
    # The step under test: one transaction each, all in one batch and one step.
    [
        # The scenario.
        "INSERT INTO ci VALUES ('c', 2)",
        "DELETE FROM ci WHERE k = 'c'",
        "INSERT INTO ci VALUES ('C', 3)",
        "INSERT INTO ci VALUES ('d', 4)",
        "UPDATE ci SET k = 'D' WHERE k = 'd'",
        "UPDATE ci SET v = 5 WHERE k = 'D'",
        # Case- and pad-equal keys, an accent-equal pair, key updates of case only.
        "INSERT INTO pad VALUES ('a', 1)",
        "DELETE FROM pad WHERE k = 'a'",
        "INSERT INTO pad VALUES ('A', 2)",
        "DELETE FROM pad WHERE k = 'A'",
        "INSERT INTO pad VALUES ('a ', 3)",
        "INSERT INTO pad VALUES ('é', 4)",
        "DELETE FROM pad WHERE k = 'e'",
        "INSERT INTO pad VALUES ('e', 5)",
        "INSERT INTO pad VALUES ('b', 6)",
        "UPDATE pad SET k = 'B' WHERE k = 'b'",
        "UPDATE pad SET k = 'Z' WHERE k = 'z'",
    ],
)
UNIQUE = (
    {
        # A secondary unique key under a _ci collation: 'x' and 'X' are one value to it.
        "uk": "CREATE TABLE uk (id INT PRIMARY KEY, name VARCHAR(10) COLLATE utf8mb4_general_ci, "
        "v INT, UNIQUE KEY u_name (name))",
    },
    # Row 2 first: the step touches it first, so its upsert comes first too.
    ["INSERT INTO uk VALUES (2, 'z', 0)", "INSERT INTO uk VALUES (1, 'x', 0)"],
    # The unique value 'x' moves from row 1 to row 2 as 'X'.
    [
        "UPDATE uk SET v = 1 WHERE id = 2",
        "UPDATE uk SET name = 'y' WHERE id = 1",
        "UPDATE uk SET name = 'X' WHERE id = 2",
    ],
)


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def exact_rows(conn: Any, table: str) -> list[tuple[Any, ...]]:
    """Every row, its text as stored (case, accents, trailing spaces), in byte order."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        return sorted(tuple(r) for r in cur.fetchall())


@pytest.mark.parametrize("case", [KEYS, UNIQUE], ids=["keys", "unique"])
@pytest.mark.parametrize("mode", ["snapshot", "parallel"])
def test_collation_equal_keys_end_equal_to_the_source(
    mode: str,
    case: tuple[dict[str, str], list[str], list[str]],
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    setup = ReaderSetup(
        services=services,
        server=server,
        source=make_topic("src", partitions=3),
        database=make_database(server),
        data_topic="{source}",
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    db = setup.database
    tables, before, step = case
    job = unique("job")
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3):
            index = TopicReader(services, setup.checkpoints_topic)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
                timeout=60,
                what="the reader's first checkpoint",
            )
            index.close()
            with connect(server, db) as conn, conn.cursor() as cur:
                for sql in [*tables.values(), *before, "CREATE TABLE cut (id INT PRIMARY KEY)"]:
                    cur.execute(sql)
                for sql in step:
                    cur.execute(sql)
                cur.execute("INSERT INTO cut VALUES (1)")
            # Everything is in the topic and released: the last row, then a watermark past it
            # on every partition.
            data = TopicReader(services, setup.source)

            def released(_: list[Any]) -> bool:
                last = [
                    r
                    for _p, _o, _k, r in data.records
                    if isinstance(r, RowChange) and r.table == "cut"
                ]
                if not last:
                    return False
                return all(
                    any(
                        isinstance(r, Resolved | Heartbeat) and r.ts >= last[-1].ts
                        for p, _o, _k, r in data.records
                        if p == partition
                    )
                    for partition in data.partitions
                )

            data.until(released, timeout=60, what="the last row released in the topic")
            data.close()
        config = job_config(
            services,
            job,
            [setup.source],
            setup.schemas_topic,
            [],
            tmp_path / "cp",
            unrouted="identity",
            available_now=True,
            mode=mode,
            parallelism=4,
        )
        applier = BatchApplier(config).start()
        try:
            query = start_query(spark, config, applier)
            try:
                await_query(query, applier)
                assert query.exception() is None, query.exception()
            finally:
                query.stop()
        finally:
            applier.close()
        with connect(server, db) as source, connect(services.resolved_sink, db) as sink:
            for table in tables:
                assert exact_rows(sink, table) == exact_rows(source, table), table
        diffs = verify(services, routes=[], schemas=[db])
        assert all(d.equal for d in diffs), [d for d in diffs if not d.equal]
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
