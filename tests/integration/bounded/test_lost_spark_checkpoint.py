"""A lost Spark checkpoint folder while the sink holds later batches: the job continues after
the sink's last whole batch (`job.resume`, `overlap.seed`) — the batch ids go on, no row is
applied twice and none is skipped. Until issue 31 Spark started again at batch 0 from the
earliest offsets and the sink refused the first batch that differed (one line naming both
positions); that refusal still guards a foreign or reset folder that holds batches
(`tests/integration/spark_apply/test_checkpoint_conflict.py`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op, TableSchema
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.spark_apply.harness import COLUMNS, SINK_DDL, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

PARTITIONS = 2


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def _count(services: Settings, db: str) -> int:
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM t")
        (n,) = cur.fetchone()  # type: ignore[misc]
        return int(n)


def test_a_lost_spark_checkpoint_folder_resumes_after_the_sinks_head(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic = make_topic("src", PARTITIONS)
    schemas_topic = make_topic("schemas", 1)
    upstream, sink_db = unique("up"), make_database(services.resolved_sink)
    tbl = TableSchema(upstream, "t", COLUMNS, ("id",))
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas([tbl])
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(SINK_DDL.format(db=sink_db, table="t"))
    folder = tmp_path / "cp"
    job = unique("job")
    config = job_config(
        services,
        job,
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*", target=f"{sink_db}.{{table}}")],
        folder,
        max_offsets_per_trigger=40,
        trigger_interval_s=0.5,
    )

    def publish(first: int, n: int) -> None:
        for key in range(first, first + n):
            pub.txn([(Op.INSERT, tbl, None, (key, key, f"l{key}", None, None))])

    publish(1, 60)
    applier = BatchApplier(config).start()
    query = start_query(spark, config, applier)
    try:
        wait_for(lambda: _count(services, sink_db) == 60, timeout=240, what="60 rows in the sink")
        head = applier.sink.head()
        assert head is not None and head.batch_id >= 2, head
    finally:
        query.stop()
        applier.close()

    shutil.rmtree(folder)  # the Spark checkpoint folder is lost
    publish(61, 60)
    applier = BatchApplier(config).start()
    query = start_query(spark, config, applier)
    try:
        wait_for(
            lambda: query.exception() is not None or _count(services, sink_db) == 120,
            timeout=240,
            what="120 rows in the sink",
        )
        assert query.exception() is None, query.exception()
        after = applier.sink.head()
    finally:
        query.stop()
        applier.close()
    assert after is not None and after.batch_id > head.batch_id, (head, after)
    with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(DISTINCT id), MIN(id), MAX(id) FROM t")
        assert tuple(cur.fetchone()) == (120, 1, 120)  # type: ignore[arg-type]
        cur.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT batch_id, step, shard) FROM `state_{job}`"
            ".apply_checkpoint"
        )
        total, distinct = cur.fetchone()  # type: ignore[misc]
    assert total == distinct > head.batch_id + 1  # no batch committed twice
    pub.close()
