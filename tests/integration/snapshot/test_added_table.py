"""A table added to the reader's configuration after its snapshot is snapshotted alone on the
next start (the others are not read again), while W2 writes; the sink ends equal."""

from __future__ import annotations

from collections.abc import Callable

from rowbus.config import Settings
from tests.integration.producer.helpers import TopicReader, reader_thread
from tests.integration.snapshot.helpers import Writer, fill, sink_tables, snapshot_state
from tests.integration.snapshot.test_initial import _drain_until_equal, _setup

ROWS_PER_TABLE = 1_000


def test_a_table_added_to_the_configuration_is_snapshotted_alone(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    setup = _setup(services, make_topic, make_database, unique)
    w2 = fill(setup.server, setup.database, ROWS_PER_TABLE)
    sink_db = make_database(services.resolved_sink)
    sink_tables(services.resolved_sink, sink_db, w2)
    first = [f"{setup.database}.t{i}" for i in range(7)]  # t7 comes later
    index = TopicReader(services, setup.checkpoints_topic)
    common = {"snapshot": "initial", "snapshot_chunk_rows": 400, "heartbeat_interval_s": 0.3}
    with reader_thread(setup, include_tables=first, **common):
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=180,
            what="the first snapshot to finish",
        )
    before = snapshot_state([r for *_, r in index.records], setup.source)
    assert before is not None
    assert f"{setup.database}.t7" not in before.tables
    writer = Writer(setup.server, w2)
    writer.start()
    try:
        with reader_thread(setup, include_tables=[*first, f"{setup.database}.t7"], **common):
            index.until(
                lambda rs: (
                    (s := snapshot_state(rs, setup.source)) is not None
                    and f"{setup.database}.t7" in s.tables
                    and s.done
                ),
                timeout=180,
                what="the added table's snapshot",
            )
            after = snapshot_state([r for *_, r in index.records], setup.source)
            assert after is not None
            added = after.tables[f"{setup.database}.t7"]
            # only the added table was read: the others' counts did not move
            # its rows and its two CREATEs (PROTOCOL.md §9.5 item 6)
            assert after.seq - before.seq == added.rows + 4 > 4  # CREATEs, markers
            assert all(after.tables[n].rows == before.tables[n].rows for n in before.tables)
            steps = writer.finish()
            apply = _drain_until_equal(services, setup, sink_db, steps)
    finally:
        writer.stop.set()
        index.close()
    twice = [k for k, n in apply.read_keys.items() if n > 1]
    assert not twice, f"snapshot rows delivered twice: {twice[:5]}"
