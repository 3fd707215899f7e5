"""`rowbus snapshot TABLE…` while streaming: a reader that never snapshotted backfills 8 tables
with existing rows while W2 updates and deletes those very keys; the sink ends equal to the
source row for row, each row read at most once. A keyless table asked in the same signal is
refused with one line, and the others go on. The reader stops mid-way and resumes from its
last chunk."""

from __future__ import annotations

from collections.abc import Callable

from rowbus.config import Settings
from rowbus.producer.snapshot.signals import publish
from rowbus.protocol.events import ReaderCheckpoint
from tests.conftest import connect
from tests.integration.producer.helpers import TopicReader, reader_thread
from tests.integration.snapshot.helpers import Writer, fill, sink_tables, snapshot_state
from tests.integration.snapshot.test_initial import _drain_until_equal, _setup

ROWS_PER_TABLE = 1_500
CHUNK = 400


def test_incremental_snapshot_while_w2_writes_ends_equal(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    setup = _setup(services, make_topic, make_database, unique)
    w2 = fill(setup.server, setup.database, ROWS_PER_TABLE)
    sink_db = make_database(services.resolved_sink)
    sink_tables(services.resolved_sink, sink_db, w2)
    other = make_database(setup.server)
    with connect(setup.server, other) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{other}`.nokey (a INT, b VARCHAR(10))")
        cur.execute(f"INSERT INTO `{other}`.nokey VALUES (1, 'x'), (1, 'x'), (2, NULL)")
    signals = make_topic("control", partitions=1)
    index = TopicReader(services, setup.checkpoints_topic)
    asked = [f"{setup.database}.{n}" for n in w2.names()]
    writer = Writer(setup.server, w2, pause_s=0.005)
    common = {
        "snapshot": "never",
        "start": "latest",
        "include_schemas": [setup.database, other],
        "signal_topic": signals,
        "snapshot_chunk_rows": CHUNK,
        "heartbeat_interval_s": 0.3,
    }
    try:
        with reader_thread(setup, **common):
            index.until(
                lambda rs: any(
                    isinstance(r, ReaderCheckpoint) and r.source == setup.source for r in rs
                ),
                timeout=60,
                what="the reader to lead",
            )
            writer.start()
            publish(
                services.kafka.client_config(), signals, setup.source, [*asked, f"{other}.nokey"]
            )
            index.until(
                lambda rs: (
                    (s := snapshot_state(rs, setup.source)) is not None
                    and sum(b.chunks for b in s.backfills.values()) >= 3
                ),
                timeout=120,
                what="a few chunks before the reader stops",
            )
        # A restarted reader goes on from the last chunk its checkpoint holds.
        stopped = snapshot_state([r for *_, r in index.records], setup.source)
        assert stopped is not None
        assert not all(b.done for b in stopped.backfills.values())
        with reader_thread(setup, **common):
            index.until(
                lambda rs: (
                    (s := snapshot_state(rs, setup.source)) is not None
                    and len(s.backfills) == 9
                    and all(b.done for b in s.backfills.values())
                ),
                timeout=240,
                what="the incremental snapshot to finish",
            )
            state = snapshot_state([r for *_, r in index.records], setup.source)
            assert state is not None
            refused = state.backfills[f"{other}.nokey"].refused
            assert refused is not None and "no primary key" in refused
            for name in asked:
                b = state.backfills[name]
                assert b.refused is None and b.rows > 0 and b.chunks >= ROWS_PER_TABLE // CHUNK
                before = stopped.backfills[name]
                assert b.chunks <= before.chunks + ROWS_PER_TABLE // CHUNK + 1, "read from zero"
            steps = writer.finish()
            assert steps > 0
            apply = _drain_until_equal(services, setup, sink_db, steps)
    finally:
        writer.stop.set()
        index.close()
    twice = [k for k, n in apply.read_keys.items() if n > 1]
    assert not twice, f"snapshot rows delivered twice: {twice[:5]}"
