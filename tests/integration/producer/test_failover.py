"""Two readers for one source: kill -9 of the leader → the other publishes within 3 s; a frozen
leader that wakes up after being replaced is fenced and publishes nothing more."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import time
from pathlib import Path

from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import ReaderSetup, TopicReader, start_reader_process
from tests.integration.producer.workload import Workload

SESSION_TIMEOUT_S = 1.5


def test_leader_kill_and_zombie_fencing(reader_setup: ReaderSetup, tmp_path: Path) -> None:
    setup = reader_setup
    Workload.create(setup.server, setup.database)
    config = setup.write_config(
        tmp_path / "rowbus.yaml", session_timeout_s=SESSION_TIMEOUT_S, flush_interval_s=0.05
    )
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b", "c")}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def all_checkpoints() -> list[ReaderCheckpoint]:
        # A fresh consumer each time: noida-db can make a read_committed consumer that fetches
        # while a producer dies inside a transaction skip records.
        reader = TopicReader(setup.services, setup.checkpoints_topic)
        try:
            reader.poll()
            return [r for _, _, _, r in reader.records if isinstance(r, ReaderCheckpoint)]
        finally:
            reader.close()

    def latest() -> ReaderCheckpoint | None:
        found = all_checkpoints()
        return found[-1] if found else None

    def took_over_at(name: str) -> float | None:
        for line in logs[name].read_text(errors="replace").splitlines():
            if f"{name} took over" in line:
                stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()
        return None

    def led_by(name: str, after_epoch: int = 0) -> ReaderCheckpoint | None:
        cp = latest()
        return cp if cp is not None and cp.reader_id == name and cp.epoch > after_epoch else None

    workload = Workload(setup.server, setup.database, count=50_000, seed=3, pace_s=0.02)
    try:
        procs["a"] = start_reader_process(config, setup.source, "a", logs["a"])
        first = wait_for(lambda: led_by("a"), timeout=60, what="reader a to lead")
        procs["b"] = start_reader_process(config, setup.source, "b", logs["b"])
        wait_for(
            lambda: "waiting for leadership" in logs["b"].read_text(),
            timeout=30,
            what="reader b to stand by",
        )
        workload.start()
        wait_for(
            lambda: led_by("a", first.epoch - 1) and latest() != first,
            timeout=30,
            what="a publishing",
        )

        # kill -9 of the leader: the standby publishes within 3 s.
        procs["a"].send_signal(signal.SIGKILL)
        killed = time.time()
        procs["a"].wait(10)
        published = wait_for(lambda: took_over_at("b"), timeout=30, what="reader b to take over")
        takeover = published - killed
        assert takeover < 3.0, f"b published {takeover:.2f}s after the leader was killed"
        second = wait_for(lambda: led_by("b"), timeout=30, what="b's checkpoint")
        assert second.epoch > first.epoch

        # Freeze b, let c take over, wake b: b is fenced and publishes nothing more.
        procs["c"] = start_reader_process(config, setup.source, "c", logs["c"])
        wait_for(
            lambda: "waiting for leadership" in logs["c"].read_text(),
            timeout=30,
            what="reader c to stand by",
        )
        procs["b"].send_signal(signal.SIGSTOP)
        third = wait_for(lambda: led_by("c"), timeout=30, what="reader c to take over")
        procs["b"].send_signal(signal.SIGCONT)
        wait_for(
            lambda: "back to the election" in logs["b"].read_text(),
            timeout=40,
            what="the woken reader b to notice it was replaced",
        )
        workload.stop.set()
        workload.join(60)
        assert workload.error is None, workload.error
        expected = workload.written.transactions
        wait_for(
            lambda: (
                (cp := led_by("c", third.epoch - 1)) is not None
                and cp.position.gtid == list(expected)[-1]
            ),
            timeout=60,
            what="c to publish the last transaction",
        )
        for name in ("b", "c"):
            procs[name].send_signal(signal.SIGTERM)
            assert procs[name].wait(30) == 0
    finally:
        workload.stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)

    # After c took over, nobody else committed with an older epoch (a zombie's commit).
    history = all_checkpoints()
    later = history[history.index(third) :]
    c_epoch = max(r.epoch for r in later if r.reader_id == "c")
    zombies = [r for r in later if r.reader_id != "c" and r.epoch <= c_epoch]
    assert not zombies, "a fenced reader committed a checkpoint"

    data = TopicReader(setup.services, setup.data_topic)
    wait_for(lambda: data.poll() == set(data.partitions), timeout=30, what="the end of the data")
    rows = [r for _, _, _, r in data.records if isinstance(r, RowChange)]
    data.close()
    keys = [(r.txn.id, r.txn.index) for r in rows]
    assert len(keys) == len(set(keys)), "a row change was delivered twice"
    got: dict[str, list[tuple[Op, int, int | None]]] = {}
    for row in sorted(rows, key=lambda r: (r.ts, r.txn.index)):
        got.setdefault(row.txn.id, []).append(
            (row.op, row.image[0], row.after[1] if row.after else None)  # type: ignore[misc]
        )
    assert got == expected
