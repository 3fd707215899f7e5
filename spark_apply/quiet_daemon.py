"""The job's PySpark daemon (``spark.python.daemon.module``): PySpark's own, except that a
forked Python worker whose connection the JVM closed exits without a trace, and that a reused
worker collects only the young generations of its garbage between tasks.

A reused worker waits on its socket for the next task; when the job stops (a batch failed,
or the query ended) the JVM closes that socket, the worker's read ends in `EOFError`, and
PySpark's daemon prints the whole Python trace to the JVM's stderr — after the job's one line,
on the user's terminal (seen: a throughput job stopped by a full sink printed 10 lines of
``EOFError`` from ``pyspark/daemon.py``). The same when the JVM hangs up while it still sets a
worker up: a task cancelled with its failed stage, whose worker answered the JVM's
authentication into a closed socket, printed ``BrokenPipeError`` from the daemon's ``worker``
(seen at load, the full-sink test in throughput mode). Nothing failed in the worker: the JVM
hung up. A worker's real failures reach the JVM over the socket as before, and end the job
with its line.
"""

from __future__ import annotations

import gc
from typing import Any

from pyspark import daemon

_worker = daemon.worker


HUNG_UP = (EOFError, BrokenPipeError, ConnectionResetError)
"""What a worker meets when the JVM closed its socket: reading (EOF) or writing (a broken pipe,
a reset) into it."""


def _worker_until_hung_up(sock: Any, authenticated: bool) -> Any:
    """`pyspark.daemon.worker`, with the JVM closing the connection taken as the end of the
    worker (a non-zero code: the daemon's child drains the socket and exits 0)."""
    try:
        return _worker(sock, authenticated)
    except HUNG_UP:
        return 1


daemon.worker = _worker_until_hung_up


class _YoungGenerations:
    """`gc` as PySpark's daemon calls it in a reused worker after each task.

    The daemon runs ``gc.collect()``, a full collection, after every task; a worker holds the
    imported modules (pyarrow, pyspark, the job's), its kept Kafka consumers and their queued
    messages, so each one traversed all of them again: 18% of the workers' CPU samples in a
    throughput-mode run (py-spy), ~0.3 s a batch of four tasks. What a task leaves in cycles is
    young (its garbage, its exceptions' frames) and is found by a collection of the young
    generations; CPython's own thresholds still run the full ones."""

    @staticmethod
    def collect() -> int:
        return gc.collect(1)


daemon.gc = _YoungGenerations  # type: ignore[attr-defined,assignment]

if __name__ == "__main__":
    daemon.manager()
