"""Overlapping batches: the writer's order and failures, and mending Spark's checkpoint when
its commit log is ahead of the sink (`spark_apply.overlap`). The checkpoint folders here are
laid out as Spark writes them (a file per batch, a hidden checksum beside it); the e2e test
`tests/e2e/test_spark_apply_overlap.py` runs the real thing."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rowbus.spark_apply.overlap import BatchWriter, has_batches, logged_offsets, rewind, seed


def checkpoint(root: Path, offsets: range, commits: range) -> Path:
    for sub, batches in (("offsets", offsets), ("commits", commits)):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for b in batches:
            (root / sub / str(b)).write_text("v1\n{}")
            (root / sub / f".{b}.crc").write_bytes(b"crc")
    (root / "metadata").write_text("{}")
    return root


def listing(root: Path, sub: str) -> list[str]:
    return sorted(p.name for p in (root / sub).iterdir())


def batches(root: Path, sub: str) -> list[int]:
    return sorted(int(p.name) for p in (root / sub).iterdir() if p.name.isdigit())


def test_one_batch_ahead_is_rerun(tmp_path: Path) -> None:
    # Batch 5 was planned and handed to the writer, Spark committed it and logged 6; the sink
    # holds 4.
    cp = checkpoint(tmp_path, range(7), range(6))
    assert rewind(cp, 4) == 5
    assert batches(cp, "offsets") == [0, 1, 2, 3, 4, 5]
    assert batches(cp, "commits") == [0, 1, 2, 3, 4]
    assert not (cp / "commits" / ".5.crc").exists()
    assert not (cp / "offsets" / ".6.crc").exists()
    assert (cp / "offsets" / ".5.crc").exists()
    assert rewind(cp, 4) is None  # done: a second start changes nothing


def test_the_first_batch_in_flight(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, range(2), range(1))
    assert rewind(cp, -1) == 0
    assert batches(cp, "offsets") == [0]
    assert batches(cp, "commits") == []


def test_a_crash_while_rewinding_is_mended_by_the_next_start(tmp_path: Path) -> None:
    # The offsets past the batch went, the commit did not.
    cp = checkpoint(tmp_path, range(6), range(6))
    assert rewind(cp, 4) == 5
    assert batches(cp, "offsets") == [0, 1, 2, 3, 4, 5]
    assert batches(cp, "commits") == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("offsets", "commits", "sink_done"),
    [
        (range(6), range(5), 4),  # in step: batch 5 is logged, runs next anyway
        (range(5), range(5), 4),  # in step, nothing logged ahead
        (range(6), range(6), 5),  # the sink holds what Spark committed
        (range(6), range(6), 6),  # the sink is ahead (a replay the sink skips)
        (range(8), range(7), 4),  # two ahead: not a batch in flight; the sink's checks refuse
        (range(0), range(0), 3),  # a lost checkpoint: the sink's checks refuse
        (range(0), range(0), -1),  # a new job
    ],
)
def test_anything_else_is_left_alone(
    tmp_path: Path, offsets: range, commits: range, sink_done: int
) -> None:
    cp = checkpoint(tmp_path, offsets, commits)
    before = (listing(cp, "offsets"), listing(cp, "commits"))
    assert rewind(cp, sink_done) is None
    assert (listing(cp, "offsets"), listing(cp, "commits")) == before


def test_no_checkpoint_folder_yet(tmp_path: Path) -> None:
    assert rewind(tmp_path / "absent", -1) is None
    assert not (tmp_path / "absent").exists()


def next_batch(root: Path) -> int:
    """The batch Spark runs next: the latest logged one if not committed, else a new one."""
    offsets, commits = batches(root, "offsets"), batches(root, "commits")
    assert offsets == list(range(len(offsets))) and commits == list(range(len(commits)))
    assert len(commits) <= len(offsets) <= len(commits) + 1  # a state Spark can start from
    return len(commits)


@given(data=st.data(), committed=st.integers(0, 12), logged_next=st.booleans())
def test_spark_resumes_at_the_sink_s_next_batch(
    data: st.DataObject, committed: int, logged_next: bool
) -> None:
    """Every state a job with one batch in flight can stop in: Spark logged `committed`
    batches as done and maybe the next one's offsets; the sink holds at most one batch less
    than Spark committed and nothing Spark did not log. After `rewind`, Spark runs next
    exactly the sink's next batch, or a batch the sink already holds (a replay it skips)."""
    import tempfile

    logged = committed + int(logged_next)
    sink_done = data.draw(st.integers(max(-1, committed - 2), logged - 1), label="sink_done")
    with tempfile.TemporaryDirectory() as tmp:
        cp = checkpoint(Path(tmp), range(logged), range(committed))
        before = next_batch(cp)
        rewind(cp, sink_done)
        assert next_batch(cp) == min(before, sink_done + 1)


def test_the_writer_writes_in_order_one_at_a_time() -> None:
    writer = BatchWriter()
    order: list[int] = []
    running = threading.Lock()
    try:
        for i in range(20):

            def write(i: int = i) -> None:
                assert running.acquire(blocking=False), "two writes at once"
                order.append(i)
                running.release()

            writer.submit(write)
        writer.wait()
    finally:
        writer.close()
    assert order == list(range(20))


def test_a_failed_write_fails_the_writer() -> None:
    """The next batch sees the failure, and so does whoever waits after it (the query's
    watcher, when that batch's own failure went elsewhere); no further write runs."""
    writer = BatchWriter()
    release = threading.Event()
    ran: list[str] = []

    def fail() -> None:
        release.wait(30)
        raise RuntimeError("sink went away")

    try:
        writer.submit(fail)
        assert writer.failure() is None  # still running: not waited for
        release.set()
        with pytest.raises(RuntimeError, match="sink went away"):
            writer.submit(lambda: ran.append("next"))
        with pytest.raises(RuntimeError, match="sink went away"):
            writer.wait()
        with pytest.raises(RuntimeError, match="sink went away"):
            writer.submit(lambda: ran.append("later"))
        assert isinstance(writer.failure(), RuntimeError)
    finally:
        writer.close()
    assert ran == []


def test_failure_is_seen_without_waiting_once_done() -> None:
    writer = BatchWriter()
    done = threading.Event()

    def fail() -> None:
        try:
            raise ValueError("bad event")
        finally:
            done.set()

    writer.submit(fail)
    assert done.wait(30)
    try:
        failure = None
        for _ in range(10_000):  # the future is marked done just after `fail` returns
            failure = writer.failure()
            if failure is not None:
                break
            threading.Event().wait(0.001)
        assert isinstance(failure, ValueError)
    finally:
        writer.close()


def test_close_waits_and_logs_a_failure_nobody_waited_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = BatchWriter()
    wrote = threading.Event()

    def fail() -> None:
        wrote.set()
        raise RuntimeError("lost at shutdown")

    writer.submit(fail)
    with caplog.at_level(logging.WARNING, logger="rowbus.spark_apply.overlap"):
        writer.close()
    assert wrote.is_set()
    assert "lost at shutdown" in caplog.text and "applies it again" in caplog.text


def test_the_collector_stays_paused_while_a_write_overlaps_the_next_read() -> None:
    import gc

    from rowbus.spark_apply.gc_pause import collector_paused

    assert gc.isenabled()
    read_may_end, write_may_end = threading.Event(), threading.Event()
    seen: list[bool] = []

    def write() -> None:
        with collector_paused():
            read_may_end.set()
            assert write_may_end.wait(30)
            seen.append(gc.isenabled())

    writer = threading.Thread(target=write)
    with collector_paused():  # the next batch's read, begun before the write
        writer.start()
        assert read_may_end.wait(30)
    seen.append(gc.isenabled())  # the read ended; the write goes on
    write_may_end.set()
    writer.join(30)
    assert seen == [False, False]
    assert gc.isenabled()
    with collector_paused(), collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector the caller had off stays off
    finally:
        gc.enable()


@pytest.mark.parametrize("exists", [False, True], ids=["deleted", "empty folder"])
def test_a_checkpoint_without_batches_is_seeded_after_the_sinks_last_batch(
    tmp_path: Path, exists: bool
) -> None:
    cp = tmp_path / "cp"
    if exists:  # a query that started there but never logged a batch
        cp.mkdir()
        (cp / "metadata").write_text('{"id":"x"}')
    assert not has_batches(cp)
    seed(cp, 7, {("t", 0): 120, ("t", 2): 5, ("u", 1): 9})
    assert has_batches(cp)
    # Spark restarts after batch 7 only with 6 logged too: both, with the same offsets.
    assert batches(cp, "offsets") == [6, 7] and batches(cp, "commits") == [6, 7]
    for batch in (6, 7):
        assert logged_offsets(cp, batch) == {("t", 0): 120, ("t", 2): 5, ("u", 1): 9}
    assert not (tmp_path / "cp.seed").exists()
    assert json.loads((cp / "metadata").read_text())["id"] != "x"  # Spark needs one
    # Spark's next batch is 8: nothing past 7 for rewind to remove.
    assert rewind(cp, 7) is None
    with pytest.raises(ValueError):
        seed(cp, 7, {})
