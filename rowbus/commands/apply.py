"""`rowbus apply`: run the Spark apply job (Kafka → the sink, exactly once)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from rowbus.commands.common import add_metrics_port, metrics_port
from rowbus.config import Settings
from rowbus.jobs import job_config, write_job
from rowbus.tree import run_group


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
        "--print-config",
        action="store_true",
        help="print the job's JSON config and exit (secrets masked: give them to a job run from "
        "it by password_file/password_env and kafka.client_from_file/client_from_env)",
    )
    add_metrics_port(cmd, "apply.metrics_port")
    cmd.set_defaults(func=_apply)


def _apply(args: argparse.Namespace, settings: Settings) -> int:
    port = metrics_port(args, settings.apply.metrics_port)
    settings = settings.model_copy(
        update={"apply": settings.apply.model_copy(update={"metrics_port": port})}
    )
    config = job_config(settings, args.available_now)
    if args.print_config:
        # Printing needs no sink: the file may be for a cluster this host cannot reach.
        print(config.shown())
        return 0
    from rowbus.spark_apply.sink_conn import precheck_sink

    # A sink that refuses the login is one line now, not after Spark's minute of start-up.
    precheck_sink(settings.resolved_sink)
    with tempfile.TemporaryDirectory(prefix="rowbus-apply-") as tmp:
        path = Path(tmp) / "job.json"
        # The file holds no secret; they reach the job in its environment (`JobConfig.at_rest`).
        secrets = write_job(path, config)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **secrets}
        # The job, its JVM and its Python workers form one process group that a SIGTERM or
        # SIGINT to this command stops as a whole.
        argv = [sys.executable, "-m", "rowbus.spark_apply", "--config", str(path)]
        return run_group([*argv, "-v"] if args.verbose else argv, env=env)
