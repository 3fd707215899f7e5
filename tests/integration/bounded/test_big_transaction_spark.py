"""A huge upstream transaction, read by the real reader (in fragments) and applied by the Spark
job: the fragments span several micro-batches, the job holds them in its stash and applies the
transaction whole, once — no row lost, none twice, never part of it visible."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.bounded.helpers import (
    PAD,
    binlog_end,
    create_big_table,
    insert_big_transaction,
)
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.spark_apply.test_spark_apply import shared_spark

ROWS = 100_000
FRAGMENT_ROWS = 5_000


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def test_huge_transaction_reaches_the_spark_sink_whole_and_once(
    reader_setup: ReaderSetup,
    services: Settings,
    spark: Any,
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    setup = reader_setup
    create_big_table(setup.server, setup.database)
    sink_db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id BIGINT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(255))")
    s = services.resolved_sink
    job = unique("job")
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=(setup.source,),
            topic_template=setup.data_topic,
            schemas_topic=setup.schemas_topic,
            routes=(RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}"),),
            checkpoint_location=tmp_path / "cp",
            state_database=f"state_{job}",
            unrouted="error",
            # Smaller than a fragment's records: the transaction spans several batches.
            max_offsets_per_trigger=4_000,
            trigger_interval_s=0.2,
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=s.host, port=s.port, user=s.user, password=s.password),
    )
    partial: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        # Snapshot mode: a reader of the sink sees none of the transaction or all of it.
        with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
            while not stop.wait(0.2):
                cur.execute("SELECT COUNT(*) FROM big")
                (n,) = cur.fetchone()  # type: ignore[misc]
                if n not in (0, ROWS):
                    partial.append(int(n))

    watcher = threading.Thread(target=watch, daemon=True)
    with reader_thread(setup, flush_interval_s=0.05, fragment_rows=FRAGMENT_ROWS) as reader:
        wait_for(lambda: reader.committed is not None, timeout=90, what="the reader to lead")
        applier = BatchApplier(config).start()
        query = start_query(spark, config, applier)
        watcher.start()
        try:
            insert_big_transaction(setup.server, setup.database, ROWS)
            end = binlog_end(setup.server)
            wait_for(
                lambda: (
                    reader.committed is not None
                    and (reader.committed.file, reader.committed.offset) >= end
                ),
                timeout=300,
                what=f"the reader to commit binlog {end}",
            )
            assert reader.metrics.fragments >= ROWS // FRAGMENT_ROWS - 1

            def applied() -> bool:
                assert query.isActive, query.exception()
                with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
                    cur.execute("SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id) FROM big")
                    return cur.fetchone() == (ROWS, ROWS, 1, ROWS)

            wait_for(applied, timeout=600, what=f"{ROWS} rows in the sink")
            with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
                cur.execute(
                    "SELECT COUNT(*) FROM big WHERE v = id % 1000 AND "
                    f"pad = REPEAT(CHAR(65 + id % 26), {PAD})"
                )
                assert cur.fetchone() == (ROWS,)
                cur.execute(
                    f"SELECT COUNT(DISTINCT batch_id) FROM `state_{job}`.apply_checkpoint "
                    "WHERE job = %s",
                    (job,),
                )
                (batches,) = cur.fetchone()  # type: ignore[misc]
            assert batches >= 3, "the transaction did not span several batches"
        finally:
            stop.set()
            query.stop()
            applier.close()
    watcher.join(10)
    assert not partial, f"the sink showed part of the transaction: {partial[:5]} rows"
