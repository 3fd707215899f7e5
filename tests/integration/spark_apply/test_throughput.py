"""Throughput mode in a real Spark session: rows keyed, collapsed and written by executor tasks.

W2-like traffic (updates, deletes, inserts; the sink with a second unique key) and the
issue's case-insensitive keys (and 'ß' = 's' under ``utf8mb4_general_ci``, which only the
sink's key skeleton, `keys.sink_key`, puts in one task) end equal to the model, in batches the executors wrote (the
driver fell back to the merger only for the batches the mode leaves it), with no (batch, step,
task) committed twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import ColumnSchema, Op, TableSchema
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, await_query, start_query
from tests.conftest import connect
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark, sink_rows

PARTITIONS = 3
SINK_DDL_UNIQUE = (
    "CREATE TABLE `{db}`.`{table}` (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(32), "
    "price DECIMAL(12,2), updated DATETIME(6), UNIQUE KEY (updated))"
)
CI = TableSchema(
    "", "ci", (ColumnSchema(name="k", type="varchar", length=10), ColumnSchema(name="v", type="int")),
    ("k",),
)  # fmt: skip


def run_available_now(config: Any) -> BatchApplier:
    applier = BatchApplier(config).start()
    try:
        query = start_query(shared_spark(), config, applier)
        await_query(query, applier)
        assert query.exception() is None, query.exception()
    finally:
        applier.close()
    return applier


def markers(services: Settings, job: str) -> tuple[int, int, int]:
    """(marker rows, distinct (batch, step, shard), rows written by executor tasks)."""
    with connect(services.resolved_sink, f"state_{job}") as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*), COUNT(DISTINCT batch_id, step, shard), "
            "COALESCE(SUM(CASE WHEN shard >= 0 AND ddl IS NULL THEN row_count END), 0) "
            "FROM apply_checkpoint"
        )
        total, distinct, by_tasks = cur.fetchone()
    return int(total), int(distinct), int(by_tasks)


def test_w2_mix_and_case_insensitive_keys_equal_the_model(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, tables=4, seed=11)
    ci = TableSchema(upstream, "ci", CI.columns, CI.primary_key)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas([*model.table_schemas.values(), ci])
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(SINK_DDL_UNIQUE.format(db=sink, table=name))
        cur.execute(
            f"CREATE TABLE `{sink}`.ci (k VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, "
            "v INT)"
        )
    for _ in range(150):
        pub.txn([model.step() for _ in range(3)])
    # The case: rows that are one row to a _ci sink, in separate transactions.
    for change in [
        (Op.INSERT, ci, None, ("A", 1)),
        (Op.INSERT, ci, None, ("c", 2)),
        (Op.DELETE, ci, ("c", 2), None),
        (Op.INSERT, ci, None, ("C", 3)),
        (Op.INSERT, ci, None, ("d", 4)),
        (Op.UPDATE, ci, ("d", 4), ("D", 4)),
        (Op.UPDATE, ci, ("D", 4), ("D", 5)),
        (Op.INSERT, ci, None, ("E", 6)),
        # One row to utf8mb4_general_ci (ß = s) that a case/accent fold alone keeps apart.
        (Op.INSERT, ci, None, ("s", 7)),
        (Op.DELETE, ci, ("s", 7), None),
        (Op.INSERT, ci, None, ("ß", 8)),
    ]:
        pub.txn([change])
    for _ in range(50):
        pub.txn([model.step() for _ in range(3)])
    pub.txn([])
    pub.close()
    job = unique("job")
    config = job_config(
        services,
        job,
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}")],
        tmp_path / "cp",
        mode="throughput",
        parallelism=4,
        max_offsets_per_trigger=400,
        available_now=True,
    )
    applier = run_available_now(config)
    for name in model.rows:
        assert sink_rows(services, sink, name) == model.rows[name], name
    with connect(services.resolved_sink, sink) as conn, conn.cursor() as cur:
        cur.execute("SELECT k, v FROM ci ORDER BY k")
        found = [tuple(r) for r in cur.fetchall()]
    assert found == [("A", 1), ("C", 3), ("D", 5), ("E", 6), ("ß", 8)]
    total, distinct, by_tasks = markers(services, job)
    assert total == distinct
    m = applier.metrics
    # The first batch goes to the driver (the executors are given the schemas the driver has
    # learnt, none yet); the others are the executors'.
    assert m.owned_batches >= 3, (m.owned_batches, dict(m.fallbacks))
    assert by_tasks > 0


UK = TableSchema(
    "", "uk",
    (ColumnSchema(name="id", type="bigint", nullable=False),
     ColumnSchema(name="name", type="varchar", length=10), ColumnSchema(name="v", type="int")),
    ("id",),
)  # fmt: skip


def apart(schema: str, table: str, tasks: int, count: int) -> list[int]:
    """`count` integer keys that the key's hash alone gives to different tasks (of `tasks`),
    in throughput mode (`ownership.owner`) and in parallel mode (`shard_writes.ShardedSteps.shard_of`)."""
    import zlib

    from rowbus.spark_apply.ownership import owner

    ids: list[int] = []
    taken: tuple[set[int], set[int]] = (set(), set())
    for candidate in range(1, 1000):
        key = (str(candidate),)
        owned = owner(f"{schema}.{table}", key) % tasks
        shard = zlib.crc32(repr((schema, table, key)).encode()) % tasks
        if owned not in taken[0] and shard not in taken[1]:
            ids.append(candidate)
            taken[0].add(owned)
            taken[1].add(shard)
        if len(ids) == count:
            return ids
    raise AssertionError(f"no {count} keys of {schema}.{table} apart over {tasks} tasks")


@pytest.mark.parametrize("mode", ["throughput", "parallel"])
def test_a_unique_value_moved_between_rows_of_different_tasks_in_one_batch(
    mode: str,
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """One upstream transaction moves unique values between rows whose keys hash to different
    write tasks: 'x' from row a to row b as 'X' (one value to the `_ci` unique key), and a
    swap of 'p' and 'q' through a third value. Written by two tasks in either order, the
    second row's upsert would meet the first's old value (1062) or clear it; the sink must
    end as the source, with no (batch, step, task) committed twice."""
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, tables=2, seed=5)
    uk = TableSchema(upstream, "uk", UK.columns, UK.primary_key)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas([*model.table_schemas.values(), uk])
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(SINK_DDL.format(db=sink, table=name))
        cur.execute(
            f"CREATE TABLE `{sink}`.uk (id BIGINT PRIMARY KEY, "
            "name VARCHAR(10) COLLATE utf8mb4_general_ci, v INT, UNIQUE KEY u_name (name))"
        )
    a, b, c, d = apart(sink, "uk", 4, 4)
    for _ in range(40):  # the first batch: the driver's (no schema learnt yet)
        pub.txn([model.step()])
    pub.txn(
        [
            (Op.INSERT, uk, None, (a, "x", 0)),
            (Op.INSERT, uk, None, (b, "z", 0)),
            (Op.INSERT, uk, None, (c, "p", 0)),
            (Op.INSERT, uk, None, (d, "q", 0)),
        ]
    )
    for _ in range(10):
        pub.txn([model.step()])
    # b's row comes first in the transaction, so its upsert is the first a task would write.
    pub.txn(
        [
            (Op.UPDATE, uk, (b, "z", 0), (b, "z", 1)),
            (Op.UPDATE, uk, (a, "x", 0), (a, "y", 0)),
            (Op.UPDATE, uk, (b, "z", 1), (b, "X", 1)),
            (Op.UPDATE, uk, (c, "p", 0), (c, "t", 0)),
            (Op.UPDATE, uk, (d, "q", 0), (d, "P", 0)),
            (Op.UPDATE, uk, (c, "t", 0), (c, "Q", 0)),
        ]
    )
    for _ in range(10):
        pub.txn([model.step()])
    pub.txn([])
    pub.close()
    job = unique("job")
    config = job_config(
        services,
        job,
        [topic],
        schemas_topic,
        [RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}")],
        tmp_path / "cp",
        mode=mode,
        parallelism=4,
        max_offsets_per_trigger=120,
        available_now=True,
    )
    applier = run_available_now(config)
    for name in model.rows:
        assert sink_rows(services, sink, name) == model.rows[name], name
    with connect(services.resolved_sink, sink) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, v FROM uk ORDER BY id")
        found = [tuple(r) for r in cur.fetchall()]
    assert found == sorted([(a, "y", 0), (b, "X", 1), (c, "Q", 0), (d, "P", 0)])
    total, distinct, by_tasks = markers(services, job)
    assert total == distinct
    assert by_tasks > 0
    if mode == "throughput":
        assert applier.metrics.owned_batches >= 2, dict(applier.metrics.fallbacks)
