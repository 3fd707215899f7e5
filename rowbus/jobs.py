"""The apply job's whole configuration, built from rowbus' settings (`rowbus apply`, the demo).

The job runs under ``spark-submit`` without the application shell, so everything it needs is
rendered into one `JobConfig` here: the apply section, Kafka client settings, the sink, and the
shard tables of sharded routes (discovered on the sources when the configuration lists none).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rowbus.clients import mysql
from rowbus.clients.mysql import SYSTEM_SCHEMAS, quote
from rowbus.config import Settings
from rowbus.exceptions import ConfigError
from rowbus.routing.routes import Router

if TYPE_CHECKING:
    from rowbus.spark_apply.settings import JobConfig

log = logging.getLogger(__name__)

_CREATE = re.compile(r"^CREATE TABLE `(?:[^`]|``)+`", re.I)


_SECURITY = ("security", "sasl", "ssl")
"""The first words of librdkafka's TLS and SASL settings."""


def job_config(settings: Settings, available_now: bool = False) -> JobConfig:
    """The job's configuration, checked against the sources and the sink first: what can be
    found wrong here is refused in one line before Spark spends a minute starting."""
    from rowbus.spark_apply.settings import JobConfig

    apply = settings.apply
    known = [s.name for s in settings.sources]
    unknown = [name for name in apply.sources if name not in known]
    if unknown:
        raise ConfigError(
            f"apply.sources names {', '.join(map(repr, unknown))}, which is not a configured "
            f"source; configured: {', '.join(known)}"
        )
    security = sorted(k for k in settings.kafka.client if k.split(".")[0] in _SECURITY)
    if apply.kafka_format == "spark" and security:
        raise ConfigError(
            f"apply.kafka_format is spark, whose Kafka connector gets only bootstrap.servers, "
            f"but kafka.client sets {', '.join(security)}: set apply.kafka_format: python (the "
            "default), which hands every Kafka setting to its readers"
        )
    if available_now:
        apply = apply.model_copy(update={"available_now": True})
    if any(r.sharded for r in apply.routes) and not apply.shard_ddl.tables:
        tables = tuple(discover_shard_tables(settings))
        apply = apply.model_copy(
            update={"shard_ddl": apply.shard_ddl.model_copy(update={"tables": tables})}
        )
    if any(r.sharded for r in apply.routes):
        _check_shard_tables(settings, apply.shard_ddl.tables)
        _create_missing_targets(settings, apply.shard_ddl.tables)
    return JobConfig(
        apply=apply,
        # Settings from files or variables stay references, read where the job starts.
        kafka={"bootstrap.servers": str(settings.kafka.bootstrap_servers), **settings.kafka.client},
        kafka_from_file=settings.kafka.client_from_file,
        kafka_from_env=settings.kafka.client_from_env,
        sink=settings.resolved_sink,
        source_names=tuple(s.name for s in settings.sources),
        zookeeper_hosts=settings.zookeeper.hosts,
        zookeeper_root=settings.zookeeper.root,
        zookeeper_auth=settings.zookeeper.auth,
    )


def write_job(path: Path, config: JobConfig) -> dict[str, str]:
    """Write the job's configuration file `path` (0600, and no secret in it:
    `JobConfig.at_rest`); returns the variables to start the job with, which carry them."""
    text, secrets = config.at_rest()
    path.touch(mode=0o600)
    path.write_text(text)
    return secrets


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


def _parse_shard(text: str) -> tuple[str, str, str]:
    source, _, qualified = text.partition("/")
    schema, _, table = qualified.partition(".")
    if not (source and schema and table):
        raise ConfigError(f"apply.shard_ddl.tables entry {text!r} is not source/schema.table")
    return source, schema, table


def _check_shard_tables(settings: Settings, tables: Sequence[str]) -> None:
    """Every listed shard table exists on its source."""
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for text in tables:
        source, schema, table = _parse_shard(text)
        wanted.setdefault(source, []).append((text, schema, table))
    for source_name, entries in wanted.items():
        try:
            server = settings.source(source_name)
        except ConfigError:
            raise ConfigError(
                f"apply.shard_ddl.tables entry {entries[0][0]!r} names source "
                f"{source_name!r}, which is not configured"
            ) from None
        with mysql.connect(server) as conn, conn.cursor() as cur:
            for text, schema, table in entries:
                cur.execute(
                    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                    "AND TABLE_NAME=%s",
                    (schema, table),
                )
                if cur.fetchone() is None:
                    raise ConfigError(
                        f"apply.shard_ddl.tables entry {text!r}: {server.name} "
                        f"({server.address}) has no table {schema}.{table}"
                    )


def _create_missing_targets(settings: Settings, tables: Sequence[str]) -> None:
    """A sharded target missing on the sink is created from its first shard's schema (as DM
    does); a route that filters or renames columns cannot be copied and is refused."""
    router = Router(settings.apply.routes, "skip")
    first: dict[str, tuple[str, str, str]] = {}
    for text in sorted(tables):
        source, schema, table = _parse_shard(text)
        target = router.shard_target(source, schema, table)
        if target is not None:
            first.setdefault(target, (source, schema, table))
    if not first:
        return
    with mysql.connect(settings.resolved_sink) as sink, sink.cursor() as cur:
        for target, (source_name, schema, table) in sorted(first.items()):
            target_schema, _, target_table = target.partition(".")
            cur.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                (target_schema, target_table),
            )
            if cur.fetchone() is not None:
                continue
            rule = router.rule(schema, table, source_name)
            if rule is not None and (rule.include or rule.exclude or rule.rename):
                raise ConfigError(
                    f"the sharded target {target} does not exist on the sink and route "
                    f"{rule.match!r} filters or renames columns: create {target} on the sink "
                    "first"
                )
            with mysql.connect(settings.source(source_name)) as src, src.cursor() as scur:
                scur.execute(f"SHOW CREATE TABLE {quote(schema)}.{quote(table)}")
                row = scur.fetchone()
            assert row is not None
            statement = _CREATE.sub(
                f"CREATE TABLE IF NOT EXISTS {quote(target_schema)}.{quote(target_table)}",
                str(row[1]),
                count=1,
            )
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(target_schema)}")
            cur.execute(statement)
            log.warning(
                "created the sharded target %s on the sink from %s/%s.%s",
                target,
                source_name,
                schema,
                table,
            )
