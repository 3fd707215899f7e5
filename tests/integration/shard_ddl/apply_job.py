"""The Spark apply job with the shard-DDL hook, as a process a test can kill -9.

``python -m tests.integration.shard_ddl.apply_job ARGS.json`` where the JSON holds ``config``
(a JobConfig), ``tables`` (upstream [source, schema, table]), ``control_topic``,
``zookeeper``, ``election`` (name) and ``actor``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from rowbus.shard_ddl.election import ZkElection
from rowbus.spark_apply.job import BatchApplier, await_query, spark_session, start_query
from rowbus.spark_apply.settings import JobConfig
from rowbus.spark_apply.shard_ddl import ShardDdlHook


def main(path: str) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    args = json.loads(Path(path).read_text())
    config = JobConfig.model_validate(args["config"])
    election = ZkElection(
        args["zookeeper"], args["actor"], name=args["election"], root="/rowbus-test"
    ).start()
    hook = ShardDdlHook(
        config,
        [tuple(t) for t in args["tables"]],  # type: ignore[misc]
        control_topic=args["control_topic"],
        election=election,
        actor=args["actor"],
        state_database=args["state_database"],
    )
    spark = spark_session(config)
    applier = BatchApplier(config, hook).start()
    try:
        await_query(start_query(spark, config, applier), applier)
    finally:
        applier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
