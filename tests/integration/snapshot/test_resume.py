"""kill -9 of a reader process in the middle of its snapshot: the next reader resumes from the
last committed chunk (a new read view for the rest), nothing is lost and no row arrives twice,
while W2 keeps writing; the sink ends equal to the source (rowbus verify)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from confluent_kafka import TopicPartition

from rowbus.config import Settings
from rowbus.producer.faults import ENV as FAULT
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import TopicReader, start_reader_process
from tests.integration.snapshot.helpers import Writer, fill, sink_tables, snapshot_state
from tests.integration.snapshot.test_initial import _drain_until_equal, _setup

ROWS_PER_TABLE = 1_250
CHUNK_ROWS = 250
"""10,000 rows in 40 chunks. The first reader kills itself right after committing the chunk that
takes its snapshot past `KILL_AT` rows (`rowbus.producer.faults`): about 6 chunks committed and
over 30 to go. (Killed from here at a row count read back from the checkpoints, the kill landed
late by as much as the test lagged the reader, so the snapshot needed 500 chunks of 20 rows to
still be running.) Between two chunks, so no transaction is left open: a kill with a chunk
delivered and not committed is test_million's, and a Subscriber reading past its abort marker
stalls on noida-db (docs/operations.md) for the 30 s `_drain_until_equal` gives it."""
KILL_AT = 1_500


def _read_to_end(index: TopicReader) -> bool:
    """Whether `index` has read every committed record (its position at the last stable
    offset, which a read_committed consumer's watermarks report) of every partition."""
    index.poll()
    for p in index.partitions:
        tp = TopicPartition(index.topic, p)
        [at] = index.consumer.position([tp])
        if at.offset < index.consumer.get_watermark_offsets(tp, timeout=10)[1]:
            return False
    return True


def test_kill_9_mid_snapshot_resumes_from_the_last_chunk_without_loss_or_duplicate(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    # One data partition: after a kill -9 mid-transaction, noida-db at times leaves a
    # partition's last stable offset behind the killed reader's transaction with several
    # partitions in it, and no read_committed consumer gets past it (ENVIRONMENT.md); the
    # resume is what this test is about.
    setup = replace(
        _setup(services, make_topic, make_database, unique),
        data_topic=make_topic("data1", partitions=1),
    )
    w2 = fill(setup.server, setup.database, ROWS_PER_TABLE)
    sink_db = make_database(services.resolved_sink)
    sink_tables(services.resolved_sink, sink_db, w2)
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_chunk_rows=CHUNK_ROWS,
        snapshot_parallelism=2,
        heartbeat_interval_s=0.3,
    )
    log = tmp_path / "reader.log"
    writer = Writer(setup.server, w2)
    writer.start()
    index = TopicReader(services, setup.checkpoints_topic)
    procs = []
    try:
        fault = {FAULT: f"kill-after-snapshot:{KILL_AT}"}
        first = start_reader_process(config, setup.source, "reader-a", log, fault)
        procs.append(first)
        try:
            code = first.wait(120)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"reader-a did not kill itself at {KILL_AT} rows in 120 s"
            ) from None
        assert code == -signal.SIGKILL, f"reader-a ended with {code}, not its kill -9"
        # What it committed before it died, read to the end (the view above may lag).
        wait_for(lambda: _read_to_end(index), timeout=60, what="the checkpoints read to their end")
        killed = snapshot_state([r for *_, r in index.records], setup.source)
        assert killed is not None
        assert not killed.done, "the snapshot finished before the kill"
        # killed right after the chunk that passed KILL_AT (its rows, and a table's CREATEs and
        # markers, at most 4)
        assert KILL_AT <= killed.seq < KILL_AT + CHUNK_ROWS + 4, f"killed at {killed.seq} rows"
        second = start_reader_process(config, setup.source, "reader-b", log)
        procs.append(second)
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=240,
            what="the second reader to finish the snapshot",
        )
        state = snapshot_state([r for *_, r in index.records], setup.source)
        assert state is not None
        assert state.restarts == 1
        # resumed, not started over: the rows committed before the kill were not read again
        assert state.seq >= killed.seq
        for name, t in killed.tables.items():
            assert state.tables[name].rows >= t.rows
        steps = writer.finish()
        apply = _drain_until_equal(services, setup, sink_db, steps)
    finally:
        writer.stop.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        index.close()
    # Each row once.
    assert sum(apply.read_keys.values()) == sum(t.rows for t in state.tables.values())
    # The counter also numbers each table's two CREATEs (§9.5 item 6) and its two markers
    # (§9.7), each published once across the kill.
    assert state.seq == sum(t.rows for t in state.tables.values()) + 4 * len(state.tables)
    twice = [k for k, n in apply.read_keys.items() if n > 1]
    assert not twice, f"snapshot rows delivered twice: {twice[:5]}"
