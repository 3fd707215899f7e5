"""CPU by process kind at the end of every micro-batch of a running apply job, and the steady
window over them (`benchmarks.apply`'s ``apply`` part).

`BatchCpu` polls the job's head in the sink (every 50 ms) and takes a `cpu.CpuSample` each time
a new batch is complete, so a run yields the CPU of each batch as well as of the window. The
window is the last batches after the first `warm` ones: a JVM compiles Spark's per-job
machinery for the first batches of its life (spark_apply/README.md, "Where the JVM's CPU
goes"), and the per-batch lines show when that stops. The sampler's own CPU (the polling and the
/proc scans, on a thread of the benchmark, which is the job's driver process) is measured on
its thread and taken out of the driver's figure, so sampling every batch does not inflate it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.cpu import CpuSample

_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class BatchEnd:
    """A sample taken once `batch_id` was complete (or at the end of the run: `batch_id` -1)."""

    batch_id: int
    sample: CpuSample
    sampler: float
    """The sampler thread's CPU seconds until then (`time.thread_time` on that thread)."""
    at: float
    """`time.monotonic()` at the sample."""


@dataclass(frozen=True, slots=True)
class Window:
    """CPU spent between two batch ends, without the sampler's, and the rows committed in it."""

    first: int
    """The first batch inside the window (the one after the window's start)."""
    last: int
    batches: int
    rows: int
    seconds: float
    spent: CpuSample


class BatchCpu:
    """Samples at every batch end; `stop` after the query ended; `windows` answers."""

    def __init__(
        self, connect: Any, state_db: str, ports: tuple[int, int, tuple[int, ...]]
    ) -> None:
        self.connect, self.state_db, self.ports = connect, state_db, ports
        self.ends: list[BatchEnd] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu = 0.0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        began = time.thread_time()
        seen = -1
        deadline = time.monotonic() + 24 * 3600  # bounded: a benchmark run is minutes long
        with self.connect() as conn:
            while not self._stop.wait(_POLL_S) and time.monotonic() < deadline:
                with contextlib.suppress(Exception), conn.cursor() as cur:
                    cur.execute(f"SELECT batch_id, complete FROM `{self.state_db}`.apply_head")
                    head = cur.fetchone()
                    if head and head[1] and int(head[0]) > seen:
                        seen = int(head[0])
                        sample = CpuSample.take(*self.ports)
                        self._cpu = time.thread_time() - began
                        self.ends.append(BatchEnd(seen, sample, self._cpu, time.monotonic()))
                self._cpu = time.thread_time() - began

    def stop(self) -> None:
        """Ends the sampling; a last sample (batch id -1) if the last batch's was missed."""
        self._stop.set()
        self._thread.join(10)
        last = CpuSample.take(*self.ports)
        self.ends.append(BatchEnd(-1, last, self._cpu, time.monotonic()))

    def rows_by_batch(self) -> dict[int, int]:
        """Rows each batch committed (its tasks' markers; shard -1, a throughput batch's
        closing marker, repeats its tasks' count)."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT batch_id, SUM(row_count) FROM `{self.state_db}`.apply_checkpoint "
                "WHERE shard >= 0 GROUP BY batch_id"
            )
            return {int(b): int(n) for b, n in cur.fetchall()}

    def window(self, start: BatchEnd, end: BatchEnd, rows: dict[int, int]) -> Window:
        """What the job spent from `start` to `end` (the sampler's CPU out of the driver's)."""
        last = end.batch_id if end.batch_id >= 0 else max(rows, default=start.batch_id)
        inside = [b for b in rows if start.batch_id < b <= last]
        spent = end.sample.minus(start.sample)
        seconds = dict(spent.seconds)
        seconds["driver Python"] -= end.sampler - start.sampler
        return Window(
            min(inside, default=last),
            last,
            len(inside),
            sum(rows[b] for b in inside),
            end.at - start.at,
            replace(spent, seconds=seconds),
        )

    def per_batch(self) -> list[Window]:
        """One window per sampled batch end after the first."""
        rows = self.rows_by_batch()
        ends = self._batch_ends()
        return [self.window(a, b, rows) for a, b in itertools.pairwise(ends)]

    def steady(self, warm: int) -> Window | None:
        """The window from the end of the `warm`-th batch to the end of the last (None when
        the `warm`-th batch's end was not sampled or no batch followed it)."""
        rows = self.rows_by_batch()
        batches = sorted(rows)
        if len(batches) <= warm:
            return None
        ends = self._batch_ends()
        start = next((e for e in ends if e.batch_id == batches[warm - 1]), None)
        if start is None or ends[-1] is start:
            return None
        return self.window(start, ends[-1], rows)

    def _batch_ends(self) -> list[BatchEnd]:
        """The batch ends, with the closing sample only if the last batch's end was missed."""
        ends = [e for e in self.ends if e.batch_id >= 0]
        closing = self.ends[-1] if self.ends and self.ends[-1].batch_id < 0 else None
        rows = self.rows_by_batch()
        if closing is not None and (not ends or ends[-1].batch_id < max(rows, default=-1)):
            ends.append(closing)
        return ends
