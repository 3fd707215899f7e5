"""The shard-DDL hook with the Iceberg sink (`spark_apply.shard_ddl`): the coordinator's
executor records the lock done without running SQL anywhere (the shards' released DDL steps
evolve the Iceberg tables), and optimistic mode is refused in one line at start. The whole
path on the real stack: tests/integration/shard_ddl/test_iceberg.py."""

from __future__ import annotations

import pytest

from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.settings import ApplySettings, IcebergSettings, JobConfig, ShardDdlSettings
from rowbus.spark_apply.shard_ddl import IcebergLockDdl, ShardDdlHook


def _config(sink_kind: str) -> JobConfig:
    return JobConfig(
        apply=ApplySettings(
            sink_kind=sink_kind,
            iceberg=IcebergSettings(),
            routes=(RouteSettings(match="db.o_*", target="t.orders", sharded=True),),
            shard_ddl=ShardDdlSettings(tables=("s/db.o_1", "s/db.o_2")),
        )
    )


def test_the_iceberg_sink_gets_an_executor_that_runs_no_sql() -> None:
    config = _config("iceberg")
    hook = ShardDdlHook(config, config.shard_tables)
    executor = hook.coordinator.executor
    assert isinstance(executor, IcebergLockDdl)
    assert executor.execute("t.orders#1", "t.orders", "ALTER TABLE t.orders ADD c INT").executed


def test_optimistic_shard_ddl_is_refused_for_iceberg_in_one_line() -> None:
    config = _config("iceberg")
    with pytest.raises(ApplyError) as refused:
        ShardDdlHook(config, config.shard_tables, optimistic=True)
    assert "apply.shard_ddl.optimistic" in str(refused.value)
    assert "\n" not in str(refused.value)
    config = _config("mysql")  # the MySQL sink keeps it
    assert not isinstance(
        ShardDdlHook(config, config.shard_tables, optimistic=True).coordinator.executor,
        IcebergLockDdl,
    )
