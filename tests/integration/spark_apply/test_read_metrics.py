"""What the job reads from Kafka is counted (`records_in_total`, `bytes_in_total`): once per
record in snapshot mode, whose held rows wait in the sink's stash; at least once in throughput
mode, whose held rows are read again. Until 2026-11-27 ``bytes_in_total`` was exported and
never counted (always 0), and throughput mode counted no record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from tests.conftest import connect
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, sink_rows
from tests.integration.spark_apply.test_throughput import run_available_now

PARTITIONS = 2


@pytest.mark.parametrize("mode", ["snapshot", "throughput"])
def test_records_and_bytes_read_are_counted(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
    mode: str,
) -> None:
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, tables=2, seed=5)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas(list(model.table_schemas.values()))
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(SINK_DDL.format(db=sink, table=name))
    for _ in range(120):
        pub.txn([model.step() for _ in range(2)])
    pub.txn([])
    pub.close()
    config = job_config(
        services,
        unique("job"),
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}")],
        tmp_path / "cp",
        mode=mode,
        max_offsets_per_trigger=150,
        available_now=True,
    )
    applier = run_available_now(config)
    for name in model.rows:
        assert sink_rows(services, sink, name) == model.rows[name], name
    m = applier.metrics
    readings = m.prometheus()
    assert (readings["records_in_total"], readings["bytes_in_total"]) == (m.records_in, m.bytes_in)
    if mode == "snapshot":
        assert (m.records_in, m.bytes_in) == (pub.records, pub.value_bytes)
    else:
        assert m.owned_batches >= 2, dict(m.fallbacks)
        # Held rows are read again by the next batch: more than once, bounded.
        assert pub.records <= m.records_in < 2 * pub.records
        assert pub.value_bytes <= m.bytes_in < 2 * pub.value_bytes
