"""Real binlog readers on both sources → Kafka → the Spark apply job → the sink, checked row for
row by `rowbus verify`. The readers start before the tables exist, so the job also receives the
CREATE TABLE DDL of target databases the sink does not have yet."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import ReaderCheckpoint
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.verify import verify
from rowbus.waiting import wait_for
from rowbus.workloads import W2
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

STEPS = 150  # W2 transactions per source, after 200 initial inserts each


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def test_w2_on_both_sources_through_real_readers_equals_upstream(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    setups = [
        ReaderSetup(
            services=services,
            server=server,
            source=make_topic("src", partitions=3),  # the topic template is "{source}"
            database=make_database(server),
            data_topic="{source}",
            checkpoints_topic=checkpoints,
            schemas_topic=schemas,
        )
        for server in services.sources[:2]
    ]
    workloads = [W2(s.database, seed=n + 1) for n, s in enumerate(setups)]
    job = unique("job")
    config = job_config(
        services,
        job,
        [s.source for s in setups],
        schemas,
        [],  # identity: the sink's databases are named as upstream, and do not exist yet
        tmp_path / "cp",
        unrouted="identity",
        max_offsets_per_trigger=5000,
    )
    applier = BatchApplier(config).start()
    try:
        with ExitStack() as stack:
            for setup in setups:
                stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
            index = TopicReader(services, checkpoints)
            index.until(
                lambda rs: (
                    {r.source for r in rs if isinstance(r, ReaderCheckpoint)}
                    >= {s.source for s in setups}
                ),
                timeout=60,
                what="a first checkpoint of both readers",
            )
            index.close()
            query = start_query(spark, config, applier)
            errors: list[BaseException] = []

            def write(setup: ReaderSetup, workload: W2) -> None:
                try:
                    with connect(setup.server, autocommit=False) as conn:
                        workload.create(conn)
                        for _ in range(STEPS):
                            workload.step(conn)
                except BaseException as exc:
                    errors.append(exc)

            writers = [
                threading.Thread(target=write, args=pair)
                for pair in zip(setups, workloads, strict=True)
            ]
            for w in writers:
                w.start()
            for w in writers:
                w.join(180)
            assert errors == []
            assert not any(w.is_alive() for w in writers), "the writers did not finish"
            try:

                def equal() -> bool:
                    if query.exception() is not None:
                        return True
                    diffs = verify(services, routes=[], schemas=[s.database for s in setups])
                    return len(diffs) == 16 and all(d.equal for d in diffs)

                wait_for(equal, timeout=240, interval=1.0, what="the sink to equal both sources")
                assert query.exception() is None, query.exception()
            finally:
                query.stop()
        diffs = verify(services, routes=[], schemas=[s.database for s in setups])
        assert sorted(d.target for d in diffs) == sorted(
            f"sink:{s.database}.t{i}" for s in setups for i in range(8)
        )
        assert all(d.equal for d in diffs), [d for d in diffs if not d.equal]
        assert sum(d.target_rows for d in diffs) > 0
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for s in setups:
                cur.execute(f"DROP DATABASE IF EXISTS `{s.database}`")
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
