"""The apply job on a real Spark standalone cluster (a master and two workers on loopback, from
the installed pyspark), launched by ``spark-submit --master spark://…`` over rows a real binlog
reader publishes; one worker is killed (kill -9, with its executor) while batches run, and
`rowbus verify` finds the sink equal to the source. In parallel mode the executors also write
the shard transactions (`rowbus.spark_apply.shard_writes`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

import rowbus.spark_apply
from rowbus.config import Settings
from rowbus.exceptions import WaitTimeoutError
from rowbus.protocol.events import ReaderCheckpoint
from rowbus.testing.spark_cluster import SparkCluster, spark_cluster, spark_env
from rowbus.verify import verify
from rowbus.waiting import wait_for
from rowbus.workloads import W2
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.spark_apply.test_spark_apply import job_config

STEPS = 900  # W2 transactions after 200 initial inserts, written while the job runs


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path / "spark", workers=2, memory="1g") as c:
        yield c


def checkpoints(services: Settings, job: str) -> int:
    """Checkpoint rows the job committed (0 before its state tables exist)."""
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        try:
            cur.execute(f"SELECT COUNT(*) FROM `state_{job}`.apply_checkpoint")
        except Exception:
            return 0
        return int(cur.fetchone()[0])


@contextlib.contextmanager
def submitted(
    cluster: SparkCluster, config_path: Path, log_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``spark-submit --master <cluster> …/spark_apply/__main__.py``; stopped by its pid's group
    (TERM: the job stops its query and session; KILL if it does not within 60 s)."""
    main = Path(rowbus.spark_apply.__file__).resolve().parent / "__main__.py"
    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        cluster.url,
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.ui.enabled=false",
        # The executors' JVMs as the driver's (tests/conftest.py: C1 alone, one GC thread).
        "--conf",
        f"spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}",
        str(main),
        "--config",
        str(config_path),
        "--log-level",
        "WARNING",
    ]
    log = log_path.open("ab")
    proc = subprocess.Popen(
        cmd, env=spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # a Python child left behind by the JVM
        log.close()


@pytest.mark.parametrize("mode", ["snapshot", "parallel"])
def test_spark_submit_on_a_standalone_cluster_survives_a_worker_kill_9(
    mode: str,
    services: Settings,
    cluster: SparkCluster,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    checkpoints_topic = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    server = services.sources[0]
    setup = ReaderSetup(
        services=services,
        server=server,
        source=make_topic("src", partitions=3),
        database=make_database(server),
        data_topic="{source}",
        checkpoints_topic=checkpoints_topic,
        schemas_topic=schemas,
    )
    workload = W2(setup.database, seed=5)
    job = unique("job")
    config = job_config(
        services,
        job,
        [setup.source],
        schemas,
        [],  # identity: the sink's database is named as upstream and created by the job
        tmp_path / "cp",
        unrouted="identity",
        max_offsets_per_trigger=400,
        mode=mode,  # parallel: the shard transactions run on the executors too
        parallelism=2,
        # The driver's UI on loopback: its REST API says when worker 0 runs a task.
        spark_conf={"spark.ui.enabled": "true", "spark.ui.port": str(cluster.driver_ui_port)},
    )
    config_path = tmp_path / "job.json"
    config_path.write_text(config.dump())
    driver_log = tmp_path / "driver.log"
    try:
        with ExitStack() as stack:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
            index = TopicReader(services, checkpoints_topic)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
                timeout=60,
                what="the reader's first checkpoint",
            )
            index.close()
            with connect(server, autocommit=False) as conn:
                workload.create(conn)
            driver = stack.enter_context(submitted(cluster, config_path, driver_log))

            def running() -> bool:
                if driver.poll() is not None:
                    raise AssertionError(driver_log.read_text(errors="replace")[-4000:])
                return True

            wait_for(
                # JVMs and Python workers of a driver and two executors: ~30 s on a quiet
                # machine, over 150 s seen at a load average of 16 on two cores.
                lambda: running() and checkpoints(services, job) >= 1,
                timeout=360,
                interval=0.5,
                what="the job on the cluster to commit its first batch",
                stop_on=(AssertionError,),
            )
            errors: list[BaseException] = []

            def write() -> None:
                try:
                    with connect(server, autocommit=False) as conn:
                        for _ in range(STEPS):
                            workload.step(conn)
                except BaseException as exc:
                    errors.append(exc)

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            # Kill while the writes flow and batches run back to back: preferably at a moment
            # worker 0's executor runs a task of a batch (reading a Kafka range, or writing a
            # shard in parallel mode), as the driver's REST API shows; tasks of small batches
            # are short, so after a while the kill goes ahead between two tasks.
            before = checkpoints(services, job)
            wait_for(
                lambda: running() and checkpoints(services, job) >= before + 1,
                timeout=180,
                interval=0.2,
                what="one more batch on the cluster",
                stop_on=(AssertionError,),
            )
            seen: list[int] = []
            with contextlib.suppress(WaitTimeoutError):
                wait_for(
                    lambda: (
                        running()
                        and seen.append(cluster.active_tasks_on(0)) is None
                        and seen[-1] > 0
                    ),
                    timeout=30,
                    interval=0.01,
                    what="a task running on worker 0",
                    stop_on=(AssertionError,),
                )
            cluster.kill_worker(0)
            print(f"worker 0 killed with {seen[-1] if seen else '?'} task(s) running on it")
            writer.join(120)
            assert not writer.is_alive(), "the writer did not finish"
            assert errors == []

            def equal() -> bool:
                running()
                diffs = verify(services, routes=[], schemas=[setup.database])
                return len(diffs) == 8 and all(d.equal for d in diffs)

            wait_for(
                equal,
                timeout=300,
                interval=1.0,
                what="the sink to equal the source after the worker's loss",
                stop_on=(AssertionError,),
            )
            assert len(cluster.alive_workers()) == 1
        log = driver_log.read_text(errors="replace")
        assert "Lost executor" in log or "lost executor" in log.lower(), log[-4000:]
        diffs = verify(services, routes=[], schemas=[setup.database])
        assert sorted(d.target for d in diffs) == [f"sink:{setup.database}.t{i}" for i in range(8)]
        assert all(d.equal for d in diffs), [d for d in diffs if not d.equal]
        assert sum(d.target_rows for d in diffs) > 0
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{setup.database}`")
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
