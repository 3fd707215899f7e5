"""A restart with Spark's checkpoint folder deleted: the job resumes from what the sink holds —
no batch applied twice, none skipped — in each mode (issue 31: idempotence that survives a new
Spark checkpoint)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.settings import JobConfig
from tests.conftest import connect
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, sink_rows
from tests.integration.spark_apply.test_throughput import markers, run_available_now

PARTITIONS = 3


# Snapshot mode, the default, is tested by tests/integration/bounded/test_lost_spark_checkpoint.py
# (inserts only, a running query); this one adds updates and deletes after the restart.
@pytest.mark.parametrize("mode", ["throughput"])
def test_a_deleted_spark_checkpoint_neither_applies_twice_nor_skips(
    mode: str,
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, tables=3, seed=13)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas(list(model.table_schemas.values()))
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(SINK_DDL.format(db=sink, table=name))
    for _ in range(70):
        pub.txn([model.step(), model.step()])
    job = unique("job")
    config = job_config(
        services,
        job,
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}")],
        tmp_path / "cp",
        mode=mode,
        parallelism=2,
        max_offsets_per_trigger=150,
        available_now=True,
    )
    run_available_now(config)
    first, _, _ = markers(services, job)
    assert first > 2
    # Non-idempotent changes after the restart would show a batch applied twice: inserts of
    # new keys, deletes and updates of rows the first run wrote.
    for _ in range(70):
        pub.txn([model.step(), model.step()])
    pub.txn([])
    pub.close()
    shutil.rmtree(tmp_path / "cp")
    applier = run_available_now(config)
    for name in model.rows:
        assert sink_rows(services, sink, name) == model.rows[name], name
    total, distinct, _ = markers(services, job)
    assert total == distinct > first
    if mode == "throughput":
        assert applier.metrics.owned_batches >= 1, dict(applier.metrics.fallbacks)


@dataclass
class HeldRows:
    """Two sources, each routed to a sink database of its own; a throughput-mode run has left
    a's transactions held in Kafka behind b's watermark (`PlannerState.reread`)."""

    models: tuple[Model, Model]
    sinks: tuple[str, str]
    pubs: tuple[Publisher, Publisher]
    config: JobConfig
    job: str


def held_rows(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
    a_partitions: int,
    a_tables: int,
) -> HeldRows:
    kafka, schemas_topic = services.kafka.client_config(), make_topic("schemas", 1)
    topics = make_topic("srca", a_partitions), make_topic("srcb", 1)
    models = Model(unique("upa"), tables=a_tables, seed=3), Model(unique("upb"), tables=1, seed=4)
    sinks = make_database(services.resolved_sink), make_database(services.resolved_sink)
    pubs = (
        Publisher(kafka, topics[0], schemas_topic, topics[0], a_partitions),
        Publisher(kafka, topics[1], schemas_topic, topics[1], 1),
    )
    for pub, model, sink in zip(pubs, models, sinks, strict=True):
        pub.schemas(list(model.table_schemas.values()))
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in model.table_schemas:
                cur.execute(SINK_DDL.format(db=sink, table=name))
    (a, b), (pub_a, pub_b) = models, pubs
    pub_b.txn([b.step()])  # source b's watermark stops here, so a's later transactions are held
    for _ in range(5):
        pub_a.txn([a.step(), a.step()])
    job = unique("job")
    config = job_config(
        services,
        job,
        list(topics),
        schemas_topic,
        [
            RouteSettings(match=f"{model.schema}.*", target=f"{sink}.{{table}}")
            for model, sink in zip(models, sinks, strict=True)
        ],
        tmp_path / "cp",
        mode="throughput",
        parallelism=2,
        available_now=True,
    )
    run_available_now(config)
    for name in a.rows:
        assert sink_rows(services, sinks[0], name) == {}, "a's rows are held"
    return HeldRows(models, sinks, pubs, config, job)


def assert_applied_once(services: Settings, held: HeldRows) -> None:
    for model, sink in zip(held.models, held.sinks, strict=True):
        for name in model.rows:
            assert sink_rows(services, sink, name) == model.rows[name], name
    total, distinct, _ = markers(services, held.job)
    assert total == distinct


def test_rows_throughput_mode_held_in_kafka_are_applied_after_a_switch_to_snapshot_mode(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Throughput mode leaves rows above the watermark in Kafka (`PlannerState.reread`), not in
    the sink's stash; a restart in snapshot mode must read them again, or they are never
    applied (found reading the code: snapshot mode's plan ignored `reread`)."""
    held = held_rows(services, make_topic, make_database, unique, tmp_path, 1, 1)
    (_, b), (pub_a, pub_b) = held.models, held.pubs
    pub_b.txn([b.step()])  # now past all of a's,
    pub_a.txn([])  # and a's past b's last
    for pub in held.pubs:
        pub.close()
    config = held.config
    snapshot = config.model_copy(
        update={"apply": config.apply.model_copy(update={"mode": "snapshot"})}
    )
    run_available_now(snapshot)
    assert_applied_once(services, held)


def test_rows_held_in_kafka_are_applied_when_a_throughput_batch_falls_back_to_the_driver(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Throughput mode holds a's rows in Kafka (`PlannerState.reread`); the next batch carries a
    DDL, so the driver's path plans it (`owned._fallback`) and must read the held rows again
    before the DDL's barrier — the same read a restart in snapshot mode uses."""
    held = held_rows(services, make_topic, make_database, unique, tmp_path, 2, 2)
    (a, b), (pub_a, pub_b) = held.models, held.pubs
    pub_a.txn([], ddl=a.alter_add_note("t0"))  # the driver plans the batch that carries it
    for _ in range(4):
        pub_a.txn([a.step(), a.step()])
    pub_b.txn([b.step()])  # b past all of a's,
    pub_a.txn([])  # and a past b's last
    for pub in held.pubs:
        pub.close()
    applier = run_available_now(held.config)
    assert applier.metrics.fallbacks, "the DDL's batch is the driver's"
    assert_applied_once(services, held)
