"""kill -9 of the apply driver while a batch is still being written after Spark committed it
(`apply.overlap_batches`): the next start re-runs that batch, and the sink still equals the
upstream model with no (batch, step, shard) committed twice.

The write is held, not raced: the test locks the sink's head row, so the writer's transaction
waits at its head update while Spark logs the batch as done and reads the next."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from rowbus.config import Settings
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.e2e.test_spark_apply_kill9 import checkpoints, kill_driver, published_job


def sink_done(services: Settings, job: str) -> int:
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT batch_id, complete FROM `state_{job}`.apply_head WHERE job = %s", (job,)
        )
        row = cur.fetchone()
    if row is None:
        return -1
    return int(row[0]) if row[1] else int(row[0]) - 1


def spark_committed(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    found = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(found, default=-1)


def test_kill_9_with_a_committed_batch_still_being_written(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    d = published_job(services, make_topic, make_database, unique, tmp_path, txns=300)
    log_path = tmp_path / "driver.log"
    log = log_path.open("w")
    proc = subprocess.Popen(d.cmd, env=d.env, stdout=log, stderr=log, start_new_session=True)
    lock = connect(services.resolved_sink, autocommit=False)
    try:
        wait_for(
            lambda: proc.poll() is not None or checkpoints(services, d.job) >= 2,
            timeout=120,
            what="the driver to commit two batches",
        )
        assert proc.poll() is None, log_path.read_text()[-3000:]
        with lock.cursor() as cur:
            cur.execute(
                f"SELECT batch_id FROM `state_{d.job}`.apply_head WHERE job = %s FOR UPDATE",
                (d.job,),
            )
        held = sink_done(services, d.job)
        # The writer now waits at the head; Spark goes on and logs the batch as done.
        wait_for(
            lambda: proc.poll() is not None or spark_committed(d.checkpoint) > held,
            timeout=120,
            what="Spark to commit a batch the sink does not hold",
        )
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert spark_committed(d.checkpoint) == held + 1
        assert sink_done(services, d.job) == held
        kill_driver(proc)
    finally:
        kill_driver(proc)
        lock.rollback()
        lock.close()
    assert sink_done(services, d.job) == held  # the held batch never reached the sink
    rerun = subprocess.run(d.cmd, env=d.env, stdout=log, stderr=log, timeout=300, check=False)
    assert rerun.returncode == 0, log_path.read_text()[-3000:]
    assert f"batch {held + 1} was still being written when the job stopped" in (
        log_path.read_text()
    )
    d.sink_equals_model()


def test_a_write_failing_with_no_batch_after_it_ends_the_job(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """One batch holds everything and its write is refused (the sink's table lacks a
    column). No later batch comes to see the failure, so the query's watcher must: the running
    job ends with the refused event's line and exit 2, instead of running on with a batch
    unapplied."""
    d = published_job(
        services,
        make_topic,
        make_database,
        unique,
        tmp_path,
        txns=20,
        sink_ddl="CREATE TABLE `{db}`.`{table}` (id BIGINT PRIMARY KEY)",
        max_offsets_per_trigger=50_000,
        available_now=False,
    )
    log_path = tmp_path / "driver.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(d.cmd, env=d.env, stdout=log, stderr=log, start_new_session=True)
        try:
            proc.wait(240)
        finally:
            kill_driver(proc)
    text = log_path.read_text()
    assert proc.returncode == 2, text[-3000:]
    assert "apply stopped: " in text and "target has no such column" in text, text[-3000:]
    assert sink_done(services, d.job) == -1  # nothing of the refused batch is in the sink
