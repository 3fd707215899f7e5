"""kill -9 of the apply driver mid-batch: the sink still equals the upstream model and no
(batch, step, shard) is committed twice."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply import apply_faults
from tests import proclogs
from tests.budget import wait_for_work
from tests.conftest import connect
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import job_config, sink_rows

PARTITIONS = 3
TXNS = 400  # 1600 records: 14 batches of 120


def checkpoints(services: Settings, job: str) -> int:
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `state_{job}`.apply_checkpoint")
        return int(cur.fetchone()[0])


def owned_batches(services: Settings, job: str) -> int:
    """Throughput-mode batches that stored their task count (their tasks are about to write)."""
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `state_{job}`.apply_tasks")
        return int(cur.fetchone()[0])


def task_markers_after(services: Settings, job: str, batch_id: int) -> int:
    """Markers committed by write tasks of batches after `batch_id`."""
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*) FROM `state_{job}`.apply_checkpoint "
            "WHERE batch_id > %s AND shard >= 0",
            (batch_id,),
        )
        return int(cur.fetchone()[0])


@dataclass
class DriverJob:
    """A job over a published model, run as ``python -m rowbus.spark_apply`` subprocesses."""

    services: Settings
    job: str
    sink: str
    model: Model
    cmd: list[str]
    env: dict[str, str]
    checkpoint: Path

    def sink_equals_model(self) -> None:
        for name in self.model.rows:
            assert sink_rows(self.services, self.sink, name) == self.model.rows[name]
        with connect(self.services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT COUNT(*), COUNT(DISTINCT batch_id, step, shard) "
                f"FROM `state_{self.job}`.apply_checkpoint"
            )
            total, distinct = cur.fetchone()
        assert total == distinct > 5


def kill_driver(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 of a driver started in its own session, with its JVM and workers (also when the
    driver killed itself: its JVM may outlive it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


FIRST_BATCH_CPU_S = 150.0
"""CPU seconds of a driver's process tree (Python, JVM, workers) to start and take a batch: a
Spark start is ~7 s of JVM CPU here, a batch a few more (tests/budget.py: a wall-clock 120 s ran
out under load 20-31)."""
RUN_CPU_S = 450.0
"""CPU seconds for a driver to apply every batch of `published_job` and end (a fixed 300 s ran
out under load)."""
WALL_S = 540.0
"""The cap for a tree that waits without using CPU: under pytest-timeout's 600 s per wait."""


def run_to_end(d: DriverJob, log: IO[str]) -> int:
    """One driver run to its end (available-now); its exit code."""
    proc = subprocess.Popen(d.cmd, env=d.env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for_work(
            lambda: proc.poll() is not None,
            session=proc.pid,
            cpu_s=RUN_CPU_S,
            wall_s=WALL_S,
            what="the driver to apply every batch and end",
        )
    finally:
        kill_driver(proc)
    return proc.returncode


def published_job(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
    txns: int = TXNS,
    sink_ddl: str = SINK_DDL,
    **apply: Any,
) -> DriverJob:
    """`txns` model transactions published on three partitions, the sink's tables made (by
    `sink_ddl`), and a job over them: available-now in batches of 120 records unless `apply`
    says otherwise."""
    topic, schemas_topic = make_topic("src", PARTITIONS), make_topic("schemas", 1)
    upstream, sink = unique("up"), make_database(services.resolved_sink)
    model = Model(upstream, seed=7)
    pub = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    pub.schemas(list(model.table_schemas.values()))
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        for name in model.table_schemas:
            cur.execute(sink_ddl.format(db=sink, table=name))
    for _ in range(txns):
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
        **{"max_offsets_per_trigger": 120, "available_now": True, **apply},
    )
    path = tmp_path / "job.json"
    path.write_text(config.dump())
    proclogs.keep(tmp_path / "driver.log", "the apply drivers")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cmd = [
        sys.executable,
        "-m",
        "rowbus.spark_apply",
        "--config",
        str(path),
        "--log-level",
        "WARNING",
    ]
    return DriverJob(services, job, sink, model, cmd, env, tmp_path / "cp")


def run_killed(d: DriverJob, log: IO[str], fault: str) -> None:
    """One driver run with ``ROWBUS_APPLY_FAULT=fault``: it must kill itself there."""
    env = {**d.env, apply_faults.ENV: fault}
    proc = subprocess.Popen(d.cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for_work(
            lambda: proc.poll() is not None,
            session=proc.pid,
            cpu_s=FIRST_BATCH_CPU_S,
            wall_s=WALL_S,
            what=f"the driver to reach {fault} and kill itself",
        )
    finally:
        kill_driver(proc)
    assert proc.returncode == -signal.SIGKILL, f"{fault}: the driver ended {proc.returncode}"


def test_kill_9_before_and_after_a_step_commit(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """The driver killed by its own fault hook (`apply_faults`), so each kill lands in its
    window every time: first with the second step's rows and checkpoint written and not
    committed (the server rolls them back; Spark's log, a batch ahead of the sink, must be
    rewound so a restart applies them again), then right after a step's commit (the sink
    holds what Spark may have logged or not: nothing lost, nothing applied twice). Three
    driver starts; a kill sent from the test when it saw a checkpoint took five kills (six
    starts) to likely land in both windows."""
    # 250 transactions, 1,000 records: 9 batches, the kills in the first three.
    d = published_job(services, make_topic, make_database, unique, tmp_path, txns=250)
    log = (tmp_path / "driver.log").open("w")
    run_killed(d, log, "kill-before-commit:2")
    assert checkpoints(services, d.job) == 1, "the second step's checkpoint was rolled back"
    run_killed(d, log, "kill-after-commit:2")
    assert checkpoints(services, d.job) == 3, "the step killed after its commit is kept"
    assert run_to_end(d, log) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    d.sink_equals_model()
    text = (tmp_path / "driver.log").read_text(errors="replace")
    assert text.count(f"{apply_faults.ENV}=kill-") == 2, "each kill fired by the hook"
    assert "(Spark runs the next batch)" in text, "the first kill with Spark's log ahead"


def test_throughput_mode_kill_9_mid_batch_then_another_parallelism(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Throughput mode: the driver killed once after a write task committed and before the
    batch's head (held by a lock on the head row), then a restart with another parallelism:
    the sink equals the model, no (batch, step, task) committed twice, and batches were
    written by executor tasks (markers of several tasks). One kill (the snapshot-mode test
    above does five): the suite's time on 2 cores is bounded."""
    # 250 transactions: 9 batches, the kill in the second; more only replay more batches.
    d = published_job(
        services,
        make_topic,
        make_database,
        unique,
        tmp_path,
        txns=250,
        mode="throughput",
        parallelism=3,
    )
    job, cmd, env = d.job, d.cmd, d.env
    log = (tmp_path / "driver.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_for_work(
            lambda: proc.poll() is not None or owned_batches(services, job) > 0,
            session=proc.pid,
            cpu_s=FIRST_BATCH_CPU_S,
            wall_s=WALL_S,
            what="the executors to take a batch",
        )
        # The head row locked: the next batch's tasks commit their markers, its head cannot
        # move, so the kill lands between the tasks' commits and the head's, every time.
        with connect(services.resolved_sink) as lock, lock.cursor() as cur:
            cur.execute(
                f"SELECT batch_id FROM `state_{job}`.apply_head WHERE job = %s FOR UPDATE", (job,)
            )
            (head,) = cur.fetchone()
            wait_for_work(
                lambda: proc.poll() is not None or task_markers_after(services, job, head) > 0,
                session=proc.pid,
                cpu_s=FIRST_BATCH_CPU_S,
                wall_s=WALL_S,
                what="a write task of the batch in flight to commit",
            )
            assert proc.poll() is None, "the driver ended before the kill"
            kill_driver(proc)  # while the batch's other tasks may still write
            lock.rollback()
    finally:
        kill_driver(proc)
    config = json.loads((tmp_path / "job.json").read_text())
    config["apply"]["parallelism"] = 2
    (tmp_path / "job.json").write_text(json.dumps(config))
    assert run_to_end(d, log) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    d.sink_equals_model()
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(DISTINCT batch_id), COUNT(DISTINCT shard) FROM `state_{job}`"
            ".apply_checkpoint WHERE shard >= 0 AND row_count > 0"
        )
        batches, tasks = cur.fetchone()
    assert batches > 5
    assert tasks >= 2


def client_pid(port: int) -> int | None:
    """The local process holding the TCP socket whose local port is `port` (from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return int(proc.name)
    return None


def waiting_workers(services: Settings, driver: int) -> list[int]:
    """Pids of the driver's Python workers (not the driver itself) whose sink transaction
    waits for a lock."""
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT p.HOST FROM information_schema.INNODB_TRX t JOIN "
            "information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
            "WHERE t.trx_state = 'LOCK WAIT'"
        )
        hosts = [str(r[0]) for r in cur.fetchall()]
    pids = []
    for host in hosts:
        pid = client_pid(int(host.rsplit(":", 1)[1])) if ":" in host else None
        if pid is None or pid == driver:
            continue
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"pyspark" in cmd or b"python" in cmd:
            pids.append(pid)
    return pids


def test_throughput_mode_kill_9_of_a_python_worker_while_tasks_write(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """kill -9 of the executor's Python worker whose write task is inside its transaction
    (held there by a lock the test takes on a table, so the kill lands mid-write every time):
    Spark runs the task again (a local master that retries tasks, as a cluster does), the
    killed attempt's transaction is rolled back by the server, and the job ends in the same
    run with the sink equal to the model and no (batch, step, task) committed twice."""
    d = published_job(
        services,
        make_topic,
        make_database,
        unique,
        tmp_path,
        txns=250,
        mode="throughput",
        parallelism=3,
        master="local[2,4]",
    )
    log = (tmp_path / "driver.log").open("w")
    proc = subprocess.Popen(d.cmd, env=d.env, stdout=log, stderr=log, start_new_session=True)
    killed: list[int] = []
    try:
        wait_for_work(
            lambda: proc.poll() is not None or owned_batches(services, d.job) > 0,
            session=proc.pid,
            cpu_s=FIRST_BATCH_CPU_S,
            wall_s=WALL_S,
            what="the executors to take a batch",
        )
        with connect(services.resolved_sink, d.sink, autocommit=False) as lock:
            with lock.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM t0 FOR UPDATE")  # every row and gap of t0
            wait_for_work(
                lambda: proc.poll() is not None or bool(waiting_workers(services, proc.pid)),
                session=proc.pid,
                cpu_s=FIRST_BATCH_CPU_S,
                wall_s=WALL_S,
                what="a write task to wait inside its transaction",
            )
            assert proc.poll() is None, "the driver ended before the kill"
            for pid in waiting_workers(services, proc.pid):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            lock.rollback()
        assert killed
        wait_for_work(
            lambda: proc.poll() is not None,
            session=proc.pid,
            cpu_s=RUN_CPU_S,
            wall_s=WALL_S,
            what="the driver to retry the task, apply every batch and end",
        )
    finally:
        kill_driver(proc)
    assert proc.returncode == 0, (tmp_path / "driver.log").read_text()[-3000:]
    d.sink_equals_model()
