"""A source table dropped while the reader snapshots it (issue #33's bad input): the snapshot's
read view holds the table's metadata lock, so the DROP waits for the view to end; the table's
snapshot is whole (its end counts every row the view showed) and the DROP follows it in the
stream, after the table's last snapshot row, so a consumer fills the table and then drops it —
nothing half-read, no reader stop. Checked on a real MariaDB through the reader and a
Subscriber."""

from __future__ import annotations

import dataclasses
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import DdlChange, RowChange, SnapshotEnd
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import TopicReader, start_reader_process
from tests.integration.snapshot.helpers import snapshot_state
from tests.integration.snapshot.test_initial import _setup
from tests.integration.snapshot.test_markers import TABLES, _run

ROWS = 3_000
CHUNK_ROWS = 15
"""Small chunks, so the DROP comes while the keyless table is being read (200 chunks)."""


def test_a_table_dropped_while_snapshotted_is_read_whole_then_dropped_in_order(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic = make_topic("kdrop", partitions=1)
    setup = dataclasses.replace(
        _setup(services, make_topic, make_database, unique), source=topic, data_topic="{source}"
    )
    db = f"`{setup.database}`"
    _run(
        setup.server,
        setup.database,
        *(sql.format(db=db) for sql in TABLES),
        f"INSERT INTO {db}.t SELECT seq, CONCAT('v', seq) FROM seq_1_to_50",
        f"INSERT INTO {db}.k SELECT seq % 97, 'x' FROM seq_1_to_{ROWS}",
    )
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_chunk_rows=CHUNK_ROWS,
        snapshot_parallelism=1,
        heartbeat_interval_s=0.3,
    )
    name = f"{setup.database}.k"
    index = TopicReader(services, setup.checkpoints_topic)
    reader = start_reader_process(config, setup.source, "reader-a", tmp_path / "reader.log")
    try:
        index.until(
            lambda rs: (
                (s := snapshot_state(rs, setup.source)) is not None and s.tables[name].chunks >= 3
            ),
            timeout=120,
            what="the reader to commit some chunks of the table",
        )
        _run(setup.server, setup.database, f"DROP TABLE {db}.k")  # waits for the read view
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=120,
            what="the snapshot to end",
        )
        assert reader.poll() is None, (tmp_path / "reader.log").read_text()[-2000:]
        rows, order = 0, []
        with Subscriber(
            services.kafka.client_config(),
            [setup.source],
            sources=[setup.source],
            checkpoints_topic=setup.checkpoints_topic,
            schemas_topic=setup.schemas_topic,
            group_id=f"kdrop-{uuid.uuid4().hex[:8]}",
        ) as sub:

            def dropped() -> bool:
                nonlocal rows
                for txn in sub.poll(0.2):
                    if txn.marker is not None:
                        if isinstance(txn.marker, SnapshotEnd) and txn.marker.table == "k":
                            order.append(("end", txn.marker.rows))
                        continue
                    for ev in txn.events:
                        if isinstance(ev, RowChange) and ev.table == "k":
                            rows += 1
                            if order and order[-1][0] == "rows":
                                continue
                            order.append(("rows", 0))
                        elif isinstance(ev, DdlChange) and "DROP" in ev.statement.upper():
                            order.append(("drop", rows))
                return any(step == "drop" for step, _ in order)

            wait_for(dropped, timeout=90, what="the DROP TABLE in the stream")
    finally:
        if reader.poll() is None:
            reader.send_signal(signal.SIGTERM)
            reader.wait(30)
        index.close()
    # Every row the read view showed, then the snapshot's end counting them, then the DROP.
    assert order == [("rows", 0), ("end", ROWS), ("drop", ROWS)], order
    assert rows == ROWS
