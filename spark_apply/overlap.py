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

import json
import logging
import shutil
import time
import uuid
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


def has_batches(checkpoint: Path) -> bool:
    """Spark's checkpoint at `checkpoint` has logged a batch (offsets or commit)."""
    return bool(_entries(checkpoint / "offsets") or _entries(checkpoint / "commits"))


def seed(checkpoint: Path, batch: int, offsets: dict[tuple[str, int], int]) -> None:
    """Spark's checkpoint at `checkpoint`, which holds no batch (deleted, or a new folder),
    made to continue after `batch`, the last batch the sink holds whole: offset-log entries
    for `batch` and the one before it with `offsets` (the next offset per partition the
    sink's state resumes from, the merge engine's own resume point) and their commits, so
    Spark's next batch is ``batch + 1`` from there — the id and offsets the sink expects, as
    after Spark's own checkpoint (README "Exactly once"). The folder is built beside it and
    renamed into place, so a crash midway leaves either no folder (seeded again at the next
    start) or the whole one. Partitions without an offset (never read) start at the log
    start, as Spark's would."""
    if has_batches(checkpoint):
        raise ValueError(f"{checkpoint} already holds batches: not seeded")
    ready = checkpoint.with_name(checkpoint.name + ".seed")
    shutil.rmtree(ready, ignore_errors=True)  # a seed a crash left half-built
    (ready / "offsets").mkdir(parents=True)
    (ready / "commits").mkdir()
    by_topic: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, {})[str(partition)] = offset
    # Spark fills the settings this entry leaves out from the session's (and says so).
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": {}}
    # Spark restarts after batch N only with N-1 logged too (it checks the pair), so N-1 is
    # written with the same offsets: as committed, it is never read as a range.
    for entry in sorted({max(0, batch - 1), batch}):
        (ready / "offsets" / str(entry)).write_text(
            f"v1\n{json.dumps(meta)}\n{json.dumps(by_topic)}"
        )
        (ready / "commits" / str(entry)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    # The query's id: Spark refuses logs without it (a new id, as for a new folder).
    (ready / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    if checkpoint.exists():  # a folder without batches: Spark never ran one there
        shutil.rmtree(checkpoint)
    ready.rename(checkpoint)
    log.warning(
        "Spark's checkpoint %s held no batch while the sink holds batch %d whole: seeded "
        "from the sink's offsets, the job continues with batch %d",
        checkpoint,
        batch,
        batch + 1,
    )


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
