"""The apply job's whole configuration, built from rowbus' settings (`rowbus apply`, the demo).

The job runs under ``spark-submit`` without the application shell, so everything it needs is
rendered into one `JobConfig` here: the apply section, Kafka client settings, the sink, and the
shard tables of sharded routes (discovered on the sources when the configuration lists none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rowbus.clients import mysql
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.config import Settings
from rowbus.consumers.routing import Router

if TYPE_CHECKING:
    from rowbus.spark_apply.settings import JobConfig


def job_config(settings: Settings, available_now: bool = False) -> JobConfig:
    from rowbus.spark_apply.settings import JobConfig

    apply = settings.apply
    if available_now:
        apply = apply.model_copy(update={"available_now": True})
    if any(r.sharded for r in apply.routes) and not apply.shard_ddl.tables:
        tables = tuple(discover_shard_tables(settings))
        apply = apply.model_copy(
            update={"shard_ddl": apply.shard_ddl.model_copy(update={"tables": tables})}
        )
    return JobConfig(
        apply=apply,
        kafka=settings.kafka.client_config(),
        sink=settings.resolved_sink,
        source_names=tuple(s.name for s in settings.sources),
        zookeeper_hosts=settings.zookeeper.hosts,
        zookeeper_root=settings.zookeeper.root,
    )


def discover_shard_tables(settings: Settings) -> list[str]:
    """``source/schema.table`` of every upstream table a sharded route sends somewhere, now
    (the one router decides, source selectors included)."""
    router = Router(settings.apply.routes, "skip")
    found = []
    for source in settings.sources:
        with mysql.connect(source) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE='BASE TABLE'"
            )
            for schema, table in cur.fetchall():
                if schema in SYSTEM_SCHEMAS:
                    continue
                if router.shard_target(source.name, str(schema), str(table)) is not None:
                    found.append(f"{source.name}/{schema}.{table}")
    return sorted(found)
