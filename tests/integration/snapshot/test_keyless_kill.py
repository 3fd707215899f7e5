"""kill -9 of a reader in the middle of a keyless table's chunked snapshot (PROTOCOL.md §9.7,
keyless tables in chunks): the next reader reads the table again from its start under a new
snapshot id, whose `snapshot_begin` empties the table again in consumers; changes made between
the two read views are dropped from the stream (the new read shows them), later ones streamed.
The Subscriber's rebuild (following from the topic's start) and the Spark sink (one run over the
whole topic into an empty database) end equal to the source — the keyless table as a multiset,
its rows neither lost nor doubled — and so does a keyed table snapshotted beside it. Between
the two readers, one started with `snapshot_markers: false` is refused in one line: it would read
the half-published table again with no new begin, doubling its rows downstream."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.exceptions import WaitTimeoutError
from rowbus.producer.exceptions import UnsafeSettingError
from rowbus.producer.faults import ENV as FAULT
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings
from rowbus.protocol.events import SnapshotBegin, SnapshotEnd
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import ReaderSetup, TopicReader, start_reader_process
from tests.integration.snapshot.helpers import snapshot_state
from tests.integration.snapshot.marked import MarkedApply
from tests.integration.snapshot.test_initial import _setup
from tests.integration.snapshot.test_markers import TABLES, _run, _spark_apply, _tables
from tests.integration.snapshot.test_resume import _read_to_end

KEYLESS_ROWS = 6_000
CHUNK_ROWS = 300
"""The keyless table (read first: `k` sorts before `t`) in 20 chunks. The first reader kills
itself right after committing the third (`rowbus.producer.faults`: the chunk that takes the
snapshot's counter, its begin marker and CREATE included, past `KILL_AT`), between two chunks:
no transaction left open, whose abort marker a Subscriber reading past it on noida-db can stall
on (docs/operations.md). (Killed from here once 3 chunks showed in the checkpoints, the kill
landed as late as the test lagged the reader, so the table needed 400 chunks of 15 rows.)"""
KILL_AT = 3 * CHUNK_ROWS


def test_a_keyless_table_ends_equal_after_a_kill_9_of_the_reader_mid_snapshot(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    # The apply job reads the topic "{source}": the source is named as its data topic. One
    # partition: after a kill -9, noida-db at times holds a partition's last stable offset
    # behind the killed transaction when it spans several (ENVIRONMENT.md).
    topic = make_topic("kkill", partitions=1)
    setup = dataclasses.replace(
        _setup(services, make_topic, make_database, unique), source=topic, data_topic="{source}"
    )
    db = f"`{setup.database}`"
    _run(
        setup.server,
        setup.database,
        *(sql.format(db=db) for sql in TABLES),
        f"INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_300",
        # duplicates and NULLs: rows identified by all their columns (§9.3)
        f"INSERT INTO {db}.k SELECT seq % 97, IF(seq % 5 = 0, NULL, 'x') "
        f"FROM seq_1_to_{KEYLESS_ROWS}",
    )
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_chunk_rows=CHUNK_ROWS,
        snapshot_parallelism=1,
        heartbeat_interval_s=0.3,
    )
    name = f"{setup.database}.k"
    log = tmp_path / "reader.log"
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
        wait_for(lambda: _read_to_end(index), timeout=60, what="the checkpoints read to their end")
        killed = snapshot_state([r for *_, r in index.records], setup.source)
        assert killed is not None
        assert not killed.tables[name].done, "the keyless table was read before the kill"
        assert killed.tables[name].chunks == 3, killed.tables[name]
        # Between the two read views: changes the second read shows, to drop from the stream.
        _run(
            setup.server,
            setup.database,
            f"DELETE FROM {db}.k WHERE a = 1 LIMIT 3",
            f"INSERT INTO {db}.k VALUES (500, 'between'), (500, 'between'), (501, NULL)",
            f"UPDATE {db}.k SET b = 'u' WHERE a = 2 LIMIT 2",
            f"DELETE FROM {db}.t WHERE id <= 5",
        )
        # Markers turned off now would read the half-published table again with no new
        # snapshot_begin to take its first rows back: the reader refuses (PROTOCOL.md §9.7).
        _refused_without_markers(setup, name)
        second = start_reader_process(config, setup.source, "reader-b", log)
        procs.append(second)
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=120,
            what="the second reader to finish the snapshot",
        )
        state = snapshot_state([r for *_, r in index.records], setup.source)
        assert state is not None and state.restarts == 1
        keyless = state.tables[name]
        assert keyless.restarts == 1, "the keyless table was not read again from its start"
        # After the second read view: streamed.
        _run(
            setup.server,
            setup.database,
            f"DELETE FROM {db}.k WHERE a = 3 LIMIT 2",
            f"INSERT INTO {db}.k VALUES (600, 'after'), (600, 'after')",
            f"UPDATE {db}.t SET v = 'after' WHERE id = 10",
        )
        markers = _rebuild(services, setup, make_database(services.resolved_sink))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        index.close()
    begins = sorted(m.snapshot for m in markers if isinstance(m, SnapshotBegin) and m.table == "k")
    ends = [m for m in markers if isinstance(m, SnapshotEnd) and m.table == "k"]
    assert len(begins) == 2 and begins[1] == f"{begins[0]}:again1", begins
    assert [(m.snapshot, m.rows) for m in ends] == [(begins[1], keyless.rows)]
    _spark_apply(services, setup, make_database(services.resolved_sink), tmp_path)


def _refused_without_markers(setup: ReaderSetup, table: str) -> None:
    """A reader with `snapshot_markers: false` stops at its start, in one line naming the
    setting and the table, before publishing anything."""
    settings = ReaderSettings(
        **setup.reader_settings(
            election=False,
            snapshot="initial",
            snapshot_chunk_rows=CHUNK_ROWS,
            snapshot_parallelism=1,
            snapshot_markers=False,
        )
    )
    reader = Reader(setup.source_connection(), settings, setup.services_for_reader())
    stop = threading.Event()
    deadline = threading.Timer(60, stop.set)  # a reader that does not refuse runs until then
    deadline.start()
    try:
        with pytest.raises(UnsafeSettingError) as refused:
            reader.run(stop)
    finally:
        deadline.cancel()
    line = str(refused.value)
    assert "\n" not in line and "reader.snapshot_markers" in line and table in line, line


def _rebuild(services: Settings, s: ReaderSetup, sink_db: str) -> list[SnapshotBegin | SnapshotEnd]:
    """The Subscriber's rebuild into `sink_db` (tables made as upstream) until it equals the
    source; the markers it met."""
    _run(services.resolved_sink, sink_db, *(sql.format(db=f"`{sink_db}`") for sql in TABLES))
    want = _tables(s.server, s.database)
    with Subscriber(
        services.kafka.client_config(),
        [s.source],
        sources=[s.source],
        checkpoints_topic=s.checkpoints_topic,
        schemas_topic=s.schemas_topic,
        group_id=f"kkill-{uuid.uuid4().hex[:8]}",
    ) as sub:
        apply = MarkedApply(services.resolved_sink, sink_db)

        def equal() -> bool:
            for _ in range(20):
                txns = sub.poll(0.2)
                if not txns:
                    break
                apply(sub, txns)
            return _tables(services.resolved_sink, sink_db) == want

        try:
            wait_for(equal, timeout=90, what="the Subscriber's rebuild to equal the source")
        except WaitTimeoutError:
            got = _tables(services.resolved_sink, sink_db)
            raise AssertionError(f"the rebuild {got} != the source {want}") from None
        finally:
            apply.close()
    return apply.markers
