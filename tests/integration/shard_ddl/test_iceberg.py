"""Shard DDL into Iceberg (issue #34): two shard tables on a real source merged into one
Iceberg table by the Spark apply job with the shard-DDL hook, through the real reader, Kafka
and the control topic. Each shard runs the same ``ALTER TABLE … ADD COLUMN`` at a different
moment, with rows of both shards between the two: the first shard's rows after its DDL wait
for the lock, the other's keep flowing in the old layout, and once both reached it the
Iceberg table gains the column in one schema commit (`spark_apply.shard_ddl.IcebergLockDdl`,
the shards' released DDL steps). The current state then equals the union of the shards row
for row, the change log holds every event once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.shard_ddl.locks import LockState
from rowbus.spark_apply.iceberg_sink import IcebergSink
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.spark_apply.settings import ShardDdlSettings
from rowbus.spark_apply.shard_ddl import ShardDdlHook
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.fidelity.test_values import _iceberg_config
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.shard_ddl.helpers import readers_ready
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

SHARDS = ("o_1", "o_2")
ALTER = "ALTER TABLE {t} ADD COLUMN c INT"


def test_a_coordinated_alter_evolves_the_merged_iceberg_table_once(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    db = make_database(server)
    topic = make_topic("shards", 3)
    control = make_topic("control", 1)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,
        database=db,
        data_topic=topic,
        checkpoints_topic=make_topic("ckpt", 1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", 1, **{"cleanup.policy": "compact"}),
    )
    with connect(server, db) as conn, conn.cursor() as cur:
        for t in SHARDS:
            cur.execute(f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, v VARCHAR(10))")
    job = unique("iceshard")
    target = f"{db}_t"
    settings = ShardDdlSettings(
        tables=tuple(f"{topic}/{db}.{t}" for t in SHARDS),
        control_topic=control,
        state_database=f"ddl_{job}",
    )
    base = job_config(
        services,
        job,
        [topic],
        setup.schemas_topic,
        [RouteSettings(match=f"{db}.o_*", target=f"{target}.orders", sharded=True)],
        tmp_path / "cp",
        unrouted="skip",
        shard_ddl=settings,
    )
    config = _iceberg_config(base, tmp_path / "ice", forms=("current", "changelog"))

    def run(*statements: str) -> None:
        with connect(server, db) as conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    def union() -> Counter[tuple[Any, ...]]:
        with connect(server, db) as conn, conn.cursor() as cur:
            cur.execute(" UNION ALL ".join(f"SELECT id, v, c FROM {t}" for t in SHARDS))
            return Counter(tuple(r) for r in cur.fetchall())

    hook = ShardDdlHook(
        config, config.shard_tables, control_topic=control, state_database=settings.state_database
    )
    applier = BatchApplier(config, hook).start()
    sink = applier.sink
    assert isinstance(sink, IcebergSink)
    catalog = sink.tables._catalog

    def current() -> Counter[tuple[Any, ...]]:
        if not catalog.table_exists((target, "orders")):
            return Counter()
        rows = catalog.load_table((target, "orders")).scan().to_arrow().to_pylist()
        return Counter((r["id"], r["v"], r.get("c")) for r in rows)

    try:
        with reader_thread(setup, heartbeat_interval_s=0.2):
            readers_ready(services, [topic])
            run(
                "INSERT INTO o_1 VALUES (1, 'a'), (2, 'b')",
                "INSERT INTO o_2 VALUES (101, 'a'), (102, 'b')",
                ALTER.format(t="o_1"),
                "INSERT INTO o_1 VALUES (3, 'c', 30)",
                "UPDATE o_1 SET c = 10 WHERE id = 1",
                # the other shard, not there yet: its rows keep the old layout
                "INSERT INTO o_2 VALUES (103, 'c')",
                "UPDATE o_2 SET v = 'B' WHERE id = 102",
                "DELETE FROM o_2 WHERE id = 101",
                ALTER.format(t="o_2"),
                "INSERT INTO o_2 VALUES (104, 'd', 40)",
                "UPDATE o_1 SET c = 20 WHERE id = 2",
            )
            want = union()
            query = start_query(shared_spark(), config, applier)
            try:
                wait_for(
                    lambda: query.exception() is not None or current() == want,
                    timeout=240,
                    interval=1.0,
                    what="the merged Iceberg table to equal the union of the shards",
                )
                assert query.exception() is None, query.exception()
            finally:
                query.stop()
        assert current() == want
        orders = catalog.load_table((target, "orders"))
        # One schema commit for the lock: the table's first schema, then the one with `c`.
        assert [[f.name for f in s.fields] for s in orders.metadata.schemas] == [
            ["id", "v"],
            ["id", "v", "c"],
        ]
        (lock,) = hook.coordinator.table
        assert lock.state is LockState.DONE, lock
        log = catalog.load_table((target, "orders_changelog")).scan().to_arrow()
        assert log.num_rows == 11  # every row event once (4 + 1 + 1 + 1 + 1 + 1 + 1 + 1)
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in (f"state_{job}", settings.state_database):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
