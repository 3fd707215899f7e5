"""A lost Spark checkpoint folder: Spark starts again at batch 0 from the earliest offsets while
the sink holds later batches. The job must stop with one line naming both positions, never
skip the batches silently."""

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


def test_a_lost_spark_checkpoint_folder_is_refused_not_skipped(
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
    config = job_config(
        services,
        unique("job"),
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
        wait_for(lambda: not query.isActive, timeout=240, what="the job to refuse the batch")
        error = str(query.exception())
    finally:
        if query.isActive:
            query.stop()
        applier.close()
    assert "the Spark checkpoint folder is lost, reset or another job's" in error, error
    # Batches Spark proposes exactly as the sink committed them are the same batches (skipped
    # rightly); the first that differs is refused, naming Spark's offsets and the sink's.
    assert f"as {topic}[" in error and "but the sink committed batch" in error, error
    assert _count(services, sink_db) == 60, "rows were applied on top of a foreign checkpoint"
    pub.close()
