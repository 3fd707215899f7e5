"""A batch's write overlaps the next batch's read: at most one batch is in flight.

`foreachBatch` plans batch N, hands its write to `BatchWriter` and returns; Spark then writes
its commit log for N and starts N+1, whose records are read and decoded while N is written.
N+1 waits for N's write (and sees its failure) before it plans, since it plans from the state
N stores in the sink. So Spark's commit log may be one batch ahead of the sink, never more.

A job that stops with a write in flight — killed, or its query failed — restarts with Spark's
logs saying "N is done" and a sink that holds N-1. `rewind` closes that gap before a query
starts: it removes Spark's log entries past what the sink holds, so Spark re-runs the sink's
next batch with the id and offsets it logged for it, which is the replay the sink already
resumes or skips (README "Exactly once"). Only these two logs are touched, and only entries
for batches the sink never completed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)


class BatchWriter:
    """One thread writing batches in order, one at a time. Lifecycle: `close()`.

    A failed write fails the writer: every later `submit` and `wait` raises that failure, so
    no batch is planned on a sink whose state this job no longer knows, and whoever waits last
    (the next batch, or `job.await_query` when none comes) sees it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="batch-writer")
        self._inflight: Future[None] | None = None
        self._failed: BaseException | None = None

    def submit(self, write: Callable[[], None]) -> None:
        """Start `write` once the write before it is done (its failure raises here)."""
        self.wait()
        self._inflight = self._pool.submit(write)

    def wait(self) -> None:
        """Until the write in flight is done; raises the writer's failure."""
        if self._failed is not None:
            raise self._failed
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            failure = inflight.exception()
            if failure is not None:
                self._failed = failure
                raise failure

    def failure(self) -> BaseException | None:
        """The writer's failure, if a write has failed by now (without waiting)."""
        inflight = self._inflight
        if self._failed is None and inflight is not None and inflight.done():
            self._failed = inflight.exception()
        return self._failed

    def close(self) -> None:
        """Waits for the write in flight; a failure nobody has seen is logged, not raised
        (the job is ending already: the next start re-runs that batch)."""
        inflight, self._inflight = self._inflight, None
        self._pool.shutdown()
        failure = inflight.exception() if inflight is not None else None
        if failure is not None and failure is not self._failed:
            log.warning(
                "the last batch's write failed (%s); the next start applies it again", failure
            )


def _entries(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _remove(folder: Path, batch: int) -> None:
    # Spark's local checkpoint files carry a hidden checksum beside them.
    for name in (f".{batch}.crc", str(batch)):
        (folder / name).unlink(missing_ok=True)


def rewind(checkpoint: Path, sink_done: int) -> int | None:
    """Makes Spark's checkpoint at `checkpoint` re-run batch ``sink_done + 1`` when its commit
    log is exactly one batch ahead of the sink (`sink_done`: the last batch the sink holds
    whole, -1 for none); returns that batch, or None when nothing had to change.

    Idempotent, so a crash midway is mended by the next start: the offsets logged past the
    batch to re-run go first, then its commit. Any other gap is left for the sink's own checks
    to refuse (`MySQLSink.previous_state`, `check_offsets`). A foreign checkpoint that happens
    to be exactly one batch ahead loses its last commit here, and its re-run batch then meets
    the same checks as any other (offsets before the sink's are refused)."""
    commits, offsets = checkpoint / "commits", checkpoint / "offsets"
    rerun = sink_done + 1
    logged = _entries(offsets)
    done = _entries(commits)
    ahead = [b for b in done if b >= rerun]
    if not ahead or max(ahead) != rerun or rerun not in logged:
        return None
    for batch in reversed([b for b in logged if b > rerun]):
        _remove(offsets, batch)
    _remove(commits, rerun)
    log.warning(
        "batch %d was still being written when the job stopped (Spark's checkpoint %s has it "
        "done, the sink does not): it runs again",
        rerun,
        checkpoint,
    )
    return rerun


def logged_offsets(checkpoint: Path, batch: int) -> dict[tuple[str, int], int] | None:
    """The end offsets Spark's offset log holds for `batch` (its write-ahead entry, written
    before the batch runs) per (topic, partition), or None when there is no such entry. The
    entry is ``v1``, the batch's metadata, then one line per source: this job has one, whose
    offsets are ``{topic: {partition: next offset}}`` (the rowbus source's and Spark's
    Kafka source's alike)."""
    import json

    entry = checkpoint / "offsets" / str(batch)
    if not entry.is_file():
        return None
    lines = entry.read_text().splitlines()
    if len(lines) != 3 or not lines[2].startswith("{"):
        return None
    offsets: dict[str, dict[str, int]] = json.loads(lines[2])
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
