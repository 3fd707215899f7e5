"""kill -9 of the reader at random moments under a running write workload: a read_committed
consumer sees every source row change exactly once, and the rebuilt table equals the source."""

from __future__ import annotations

import random
import signal
from pathlib import Path

from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, start_reader_process
from tests.integration.producer.workload import Workload

KILLS = 10


def test_kill_9_under_load_delivers_every_change_exactly_once(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    setup = reader_setup
    Workload.create(setup.server, setup.database)
    config = setup.write_config(tmp_path / "rowbus.yaml", election=False, flush_interval_s=0.05)
    log = tmp_path / "reader.log"
    rng = random.Random(20240229)

    def checkpoints() -> list[ReaderCheckpoint]:
        # A fresh consumer each time: noida-db can make a read_committed consumer that fetches
        # while a producer dies inside a transaction skip records (see the data check below).
        reader = TopicReader(setup.services, setup.checkpoints_topic)
        try:
            reader.poll()
            return [r for _, _, _, r in reader.records if isinstance(r, ReaderCheckpoint)]
        finally:
            reader.close()

    def leading(name: str) -> bool:
        return f"{name} leads source" in log.read_text(errors="replace")

    # The first reader starts at `latest` before any write, so everything is after it.
    proc = start_reader_process(config, setup.source, "r0", log)
    wait_for(lambda: len(checkpoints()) >= 1, timeout=60, what="the first checkpoint")
    workload = Workload(setup.server, setup.database, count=20_000, seed=7, pace_s=0.01)
    workload.start()
    try:
        for run in range(KILLS):
            # Once it leads (it commits at once), kill it at a random moment of its work.
            wait_for(
                lambda n=f"r{run}", p=proc: leading(n) or p.poll() is not None,
                timeout=60,
                what=f"reader run {run} to lead",
            )
            assert proc.poll() is None, f"reader run {run} died"
            workload.stop.wait(rng.uniform(0.2, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            proc = start_reader_process(config, setup.source, f"r{run + 1}", log)
        workload.stop.set()
        workload.join(120)
        assert not workload.is_alive(), "workload did not finish"
        assert workload.error is None, workload.error
        expected = workload.written.transactions
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            assert row is not None
            end = (str(row[0]), int(row[1]))
        last = f"r{KILLS}"

        def caught_up() -> bool:
            return any(
                r.reader_id == last and (r.position.file, r.position.offset) >= end
                for r in checkpoints()
            )

        wait_for(caught_up, timeout=90, what=f"{last} to checkpoint binlog {end}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        workload.stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # Read the finished topic with a fresh read_committed consumer. (noida-db can make a
    # consumer that fetches *while* a producer dies inside a transaction skip committed records;
    # the log itself is right, as this check shows.)
    data = TopicReader(setup.services, setup.data_topic)
    wait_for(lambda: data.poll() == set(data.partitions), timeout=30, what="the end of the data")
    rows = [r for _, _, _, r in data.records if isinstance(r, RowChange)]
    # Across every restart the clock, restored from the checkpoint, never went back.
    for partition in data.partitions:
        stamps = [r.ts for p, _, _, r in data.records if p == partition and hasattr(r, "ts")]
        assert stamps == sorted(stamps), f"ts went back on partition {partition}"
    data.close()

    # Exactly once: no (transaction, index) twice, and per transaction exactly what was written.
    keys = [(r.txn.id, r.txn.index) for r in rows]
    assert len(keys) == len(set(keys)), "a row change was delivered twice"
    by_txn: dict[str, list[RowChange]] = {}
    for row in rows:
        by_txn.setdefault(row.txn.id, []).append(row)
    assert set(by_txn) == set(expected), "transactions missing or unexpected"
    for gtid, changes in expected.items():
        got = sorted(by_txn[gtid], key=lambda r: r.txn.index)
        assert [r.txn.count for r in got] == [len(changes)] * len(changes)
        assert [(r.op, r.image[0], r.after[1] if r.after else None) for r in got] == changes

    # The table rebuilt from the events equals the source table.
    state: dict[int, tuple[object, ...]] = {}
    for row in sorted(rows, key=lambda r: r.ts):
        if row.op is Op.DELETE:
            del state[row.image[0]]  # type: ignore[arg-type]
        else:
            assert row.after is not None
            state[row.after[0]] = row.after  # type: ignore[index]
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v, note FROM w")
        table = {r[0]: tuple(r) for r in cur.fetchall()}
    assert state == table
    text = log.read_text()
    assert "Traceback" not in text
    assert text.count(" leads source ") >= KILLS + 1
    assert len(expected) > 300, "the workload ran while the reader was killed"
