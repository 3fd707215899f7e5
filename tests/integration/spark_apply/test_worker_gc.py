"""A reused Python worker does not run a full garbage collection after each task.

PySpark's daemon calls ``gc.collect()`` (all generations) in a reused worker after every task;
a worker that holds the job's modules and kept Kafka consumers spent ~0.3 s of CPU a batch in it
(py-spy over a throughput-mode run: 18% of the workers' samples). The job's daemon
(`quiet_daemon`) collects the young generations there instead; CPython's own thresholds still
run the full collections (spark_apply README "Batch size in throughput mode")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.spark_apply.test_spark_apply import shared_spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def _generations_since_last_task(_: Any) -> Any:
    """(pid, the generations collected since this worker's previous task, or None on its
    first), after a full collection of its own that the next task does not count."""
    import gc
    import os
    import sys

    seen = getattr(sys, "_rowbus_test_gc", None)
    got = None
    if seen is None:
        seen = []
        sys._rowbus_test_gc = seen  # type: ignore[attr-defined]
        gc.callbacks.append(
            lambda phase, info: phase == "start" and seen.append(info["generation"])
        )
    else:
        got = list(seen)
    # Resets CPython's count of long-lived objects, so no automatic full collection is due
    # before the next task: one there is the daemon's.
    gc.collect()
    seen.clear()
    return [(os.getpid(), got)]


def test_a_reused_worker_collects_only_the_young_generations_between_tasks(spark: Any) -> None:
    sc = spark.sparkContext
    between: list[list[int]] = []
    for _ in range(10):  # bounded: reuse shows on the second job already
        rows = sc.parallelize([0, 1], 2).flatMap(_generations_since_last_task).collect()
        between += [got for _, got in rows if got is not None]
        if len(between) >= 4:
            break
    assert between, "no Python worker ran two tasks: spark.python.worker.reuse is off?"
    assert all(2 not in got for got in between), between
    assert any(got for got in between), "no collection at all between tasks"
