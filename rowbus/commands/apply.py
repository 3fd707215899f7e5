"""`rowbus apply`: run the Spark apply job (Kafka → the sink, exactly once)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rowbus.clients import mysql
from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "apply",
        help="run the Spark apply job: merge the sources' topics by watermark and apply them to "
        "the sink with the checkpoint in the same transaction (settings: the apply section)",
    )
    cmd.add_argument(
        "--available-now", action="store_true", help="apply what is in the topics now, then stop"
    )
    cmd.add_argument(
        "--print-config", action="store_true", help="print the job's JSON config and exit"
    )
    cmd.set_defaults(func=_apply)


def job_config_json(settings: Settings, available_now: bool = False) -> str:
    from rowbus.spark_apply.settings import JobConfig, SinkConnection

    apply = settings.apply
    if available_now:
        apply = apply.model_copy(update={"available_now": True})
    if any(r.sharded for r in apply.routes) and not apply.shard_ddl.tables:
        tables = tuple(discover_shard_tables(settings))
        apply = apply.model_copy(
            update={"shard_ddl": apply.shard_ddl.model_copy(update={"tables": tables})}
        )
    sink = settings.resolved_sink
    config = JobConfig(
        apply=apply,
        kafka=settings.kafka.client_config(),
        sink=SinkConnection(host=sink.host, port=sink.port, user=sink.user, password=sink.password),
        source_names=tuple(s.name for s in settings.sources),
        zookeeper_hosts=settings.zookeeper.hosts,
        zookeeper_root=settings.zookeeper.root,
    )
    return config.dump()


def discover_shard_tables(settings: Settings) -> list[str]:
    """``source/schema.table`` of every upstream table a sharded route matches, now."""
    import fnmatch

    patterns = [r.match for r in settings.apply.routes if r.sharded]
    found = []
    for source in settings.sources:
        with (
            mysql.connect(
                source,
                connect_timeout=10,
            ) as conn,
            conn.cursor() as cur,
        ):
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE='BASE TABLE'"
            )
            for schema, table in cur.fetchall():
                if any(fnmatch.fnmatchcase(f"{schema}.{table}", p) for p in patterns):
                    found.append(f"{source.name}/{schema}.{table}")
    return sorted(found)


def _apply(args: argparse.Namespace, settings: Settings) -> int:
    text = job_config_json(settings, args.available_now)
    if args.print_config:
        print(text)
        return 0
    with tempfile.TemporaryDirectory(prefix="rowbus-apply-") as tmp:
        path = Path(tmp) / "job.json"
        path.touch(mode=0o600)
        path.write_text(text)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        return subprocess.call(
            [sys.executable, "-m", "rowbus.spark_apply", "--config", str(path)], env=env
        )
