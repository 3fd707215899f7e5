"""A keyless table of a million rows snapshotted by a reader process with its memory bounded
(PROTOCOL.md §9.7, keyless tables in chunks): one streaming SELECT of the read view cut every
`CHUNK_ROWS` rows, each chunk a Kafka transaction of its own, so the reader's peak RSS (the
kernel's `VmHWM` of the process) stays far below what the table's rows take in memory; read in
one chunk, every row would be held at once (as Python tuples, then as encoded records).

Narrow rows (one INT), bulk-loaded from MariaDB's sequence engine, keep the test short."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rowbus.config import Settings
from tests.conftest import connect
from tests.integration.producer.helpers import TopicReader, start_reader_process
from tests.integration.snapshot.helpers import snapshot_state
from tests.integration.snapshot.test_initial import _setup

ROWS = 1_000_000
CHUNK_ROWS = 20_000
PEAK_RSS_BOUND = 200 << 20
"""Peak RSS allowed to the reader process. Measured here (2026-11-26, same run): 109 MiB cut
in chunks of 20,000 rows, against 925 MiB for the same table read in one chunk
(`snapshot_markers: false`: every row held as a tuple, then as an encoded record), at the same
~17 CPU-seconds of the reader."""


def _peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (`VmHWM` of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def _cpu_s(pid: int) -> float:
    """The process's user + system CPU time in seconds (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_million_row_keyless_table_is_snapshotted_with_the_readers_memory_bounded(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    setup = replace(
        _setup(services, make_topic, make_database, unique),
        data_topic=make_topic("data1", partitions=1),  # keyless: dispatched by table (§9.3)
    )
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{setup.database}`.k (a INT)")
        cur.execute(f"INSERT INTO `{setup.database}`.k SELECT seq FROM seq_1_to_{ROWS}")
        conn.commit()
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_chunk_rows=CHUNK_ROWS,
        snapshot_parallelism=1,
        heartbeat_interval_s=0.5,
    )
    index = TopicReader(services, setup.checkpoints_topic)
    reader = start_reader_process(config, setup.source, "reader-k", tmp_path / "reader.log")
    try:
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=180,
            what="the reader to finish the snapshot of the keyless table",
        )
        assert reader.poll() is None, "the reader exited"
        peak, cpu = _peak_rss(reader.pid), _cpu_s(reader.pid)
    finally:
        if reader.poll() is None:
            reader.send_signal(signal.SIGTERM)
            reader.wait(30)
        index.close()
    state = snapshot_state([r for *_, r in index.records], setup.source)
    assert state is not None
    table = state.tables[f"{setup.database}.k"]
    assert (table.rows, table.chunks, table.restarts) == (ROWS, ROWS // CHUNK_ROWS, 0)
    print(f"reader: peak RSS {peak / 2**20:.0f} MiB, {cpu:.1f} CPU-s for {ROWS:,} keyless rows")
    assert peak < PEAK_RSS_BOUND, f"the reader's peak RSS {peak / 2**20:.0f} MiB is not bounded"
