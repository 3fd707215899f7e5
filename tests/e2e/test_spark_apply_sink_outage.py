"""The sink goes away while the apply job runs (its connections reset mid-batch, new ones
refused for a while): the job waits for it, starts its query again from the checkpoint, and
the sink ends equal to the upstream model with no (batch, step, shard) committed twice. With
``apply.sink_retry_s`` shorter than the outage, the job stops with one line instead."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.settings import JobConfig, SinkConnection
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.e2e.test_spark_apply_kill9 import checkpoints
from tests.faults.proxy import Proxy
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, sink_rows

PARTITIONS = 2


def _through(config: JobConfig, proxy: Proxy) -> JobConfig:
    sink = config.sink
    return config.model_copy(
        update={
            "sink": SinkConnection(
                host="127.0.0.1", port=proxy.port, user=sink.user, password=sink.password
            )
        }
    )


def _start(config: JobConfig, tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    path = tmp_path / f"{name}.json"
    path.write_text(config.dump())
    log = tmp_path / f"{name}.log"
    cmd = [sys.executable, "-m", "rowbus.spark_apply", "--config", str(path)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=out, start_new_session=True)
    return proc, log


def test_the_job_rides_out_a_sink_outage_and_stops_after_its_retry_window(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, seed=11)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas(list(model.table_schemas.values()))
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(SINK_DDL.format(db=sink, table=name))
    for _ in range(150):
        pub.txn([model.step()])
    s = services.resolved_sink
    proxy = Proxy((s.host, s.port))
    job = unique("job")
    routes = [RouteSettings(match=f"{upstream}.*", target=f"{sink}.{{table}}")]
    config = _through(
        job_config(
            services, job, [topic], schemas_topic, routes, tmp_path / "cp",
            max_offsets_per_trigger=100, sink_retry_s=120,
        ),
        proxy,
    )  # fmt: skip
    proc, log = _start(config, tmp_path, "job")
    try:
        wait_for(
            lambda: proc.poll() is not None or checkpoints(services, job) > 0,
            timeout=180,
            what="the job to commit a batch",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proxy.cut()  # every sink connection reset, mid-batch or between batches
        for _ in range(150):  # meanwhile upstream goes on
            pub.txn([model.step()])
        pub.txn([])
        wait_for(
            lambda: (
                proc.poll() is not None or "starts again from its checkpoint" in log.read_text()
            ),
            timeout=120,
            what="the job to notice the sink is gone",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proxy.restore()
        wait_for(
            lambda: (
                proc.poll() is not None
                or all(sink_rows(services, sink, n) == rows for n, rows in model.rows.items())
            ),
            timeout=240,
            what="the sink to equal the upstream model after the outage",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        assert proxy.connections > 2  # the job connected again after the cut
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(60)
    pub.close()
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT batch_id, step, shard) "
            f"FROM `state_{job}`.apply_checkpoint"
        )
        total, distinct = cur.fetchone()
    assert total == distinct > 1

    # An outage longer than the retry window: one line naming the sink, exit 1.
    short = config.model_copy(
        update={"apply": config.apply.model_copy(update={"sink_retry_s": 3.0})}
    )
    proxy.cut()
    try:
        proc, log = _start(short, tmp_path, "short")
        proc.wait(240)
    finally:
        if proc.poll() is None:
            proc.kill()
        proxy.close()
    text = log.read_text()
    assert proc.returncode == 1, text[-3000:]
    last = [ln for ln in text.splitlines() if "rowbus.spark_apply" in ln][-1]
    assert "sink unavailable" in last and "apply.sink_retry_s" in last, last
