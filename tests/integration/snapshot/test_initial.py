"""Initial snapshot on a real source that already holds rows, with W2 writing all along:
reader -> Kafka -> Subscriber -> sink, compared with the source by `rowbus verify`; every
snapshot row arrives once; the snapshot stops and resumes from its last chunk."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.snapshot.helpers import SinkApply, Writer, fill, sink_tables, snapshot_state

ROWS_PER_TABLE = 3_000


def _setup(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> ReaderSetup:
    server = services.sources[0]
    return ReaderSetup(
        services=services,
        server=server,
        source=unique("snap"),
        database=make_database(server),
        data_topic=make_topic("data", partitions=3),
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )


def _drain_until_equal(
    services: Settings, setup: ReaderSetup, sink_db: str, writer_steps: int
) -> SinkApply:
    """A Subscriber applies everything to the sink until `rowbus verify` finds it equal.

    noida-db sometimes leaves a fetching read_committed consumer short of records committed
    since (ENVIRONMENT.md; seen here once after a kill -9 of the reader): when the merge makes
    no progress for 30 s, a fresh Subscriber starts over from the beginning (the sink's upserts
    and deletes replay to the same state) and the snapshot-row counts start afresh."""
    last: list[object] = []
    deadline = time.monotonic() + 300
    for attempt in range(6):
        try:
            apply = _apply_run(services, setup, sink_db, deadline, last)
        except _Stalled:
            print("merge stalled; a fresh subscriber starts over", last[:2])
            continue
        except Exception:
            print("NOT EQUAL", last)
            raise
        print("equal after", attempt + 1, "subscriber run(s); writer steps", writer_steps)
        return apply
    raise AssertionError(f"the sink never equalled the source: {last}")


def _apply_run(
    services: Settings, setup: ReaderSetup, sink_db: str, deadline: float, last: list[object]
) -> SinkApply:
    routes = [RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}")]
    with Subscriber(
        services.kafka.client_config(),
        [setup.data_topic],
        sources=[setup.source],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=f"snap-{uuid.uuid4().hex[:8]}",
    ) as sub:
        apply = SinkApply(services, sink_db, sub)
        progress = [time.monotonic()]

        def equal() -> bool:
            for _ in range(20):
                txns = sub.poll(0.2)
                if not txns:
                    break
                progress[0] = time.monotonic()
                for txn in txns:
                    apply(list(txn.events))
            diffs = verify(services, routes, [setup.database])
            last[:] = [apply.rows, sub.blocked_by(), *(d for d in diffs if not d.equal)]
            if len(diffs) == 8 and all(d.equal for d in diffs):
                return True
            if time.monotonic() - progress[0] > 30:
                raise _Stalled
            return False

        try:
            wait_for(
                equal,
                timeout=max(1.0, deadline - time.monotonic()),
                what="the sink to equal the source (rowbus verify)",
                stop_on=(_Stalled,),
            )
        finally:
            apply.close()
        return apply


class _Stalled(Exception):
    pass


def test_initial_snapshot_with_concurrent_writes_ends_equal_and_reads_each_row_once(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    setup = _setup(services, make_topic, make_database, unique)
    w2 = fill(setup.server, setup.database, ROWS_PER_TABLE)
    sink_db = make_database(services.resolved_sink)
    sink_tables(services.resolved_sink, sink_db, w2)
    writer = Writer(setup.server, w2)
    writer.start()
    index = TopicReader(services, setup.checkpoints_topic)
    started = time.monotonic()
    with reader_thread(
        setup,
        snapshot="initial",
        snapshot_chunk_rows=700,
        snapshot_parallelism=2,
        heartbeat_interval_s=0.3,
    ) as reader:
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=240,
            what="the snapshot to finish",
        )
        elapsed = time.monotonic() - started
        state = snapshot_state([r for *_, r in index.records], setup.source)
        assert state is not None
        print(f"snapshot: {state.seq} rows in {elapsed:.1f}s ({state.seq / elapsed:,.0f} rows/s)")
        steps = writer.finish()
        assert steps > 0
        apply = _drain_until_equal(services, setup, sink_db, steps)
        assert reader.committed is not None
    index.close()
    # every snapshot row once: as many READ rows as the snapshot counted, no key twice
    # Each row once.
    assert sum(apply.read_keys.values()) == sum(t.rows for t in state.tables.values())
    # + each table's two CREATEs (§9.5 item 6) and its two markers (§9.7)
    assert state.seq == sum(t.rows for t in state.tables.values()) + 4 * len(state.tables)
    twice = [k for k, n in apply.read_keys.items() if n > 1]
    assert not twice, f"snapshot rows delivered twice: {twice[:5]}"
    assert state.seq >= 8 * ROWS_PER_TABLE * 0.8  # W2 deletes some of them meanwhile
    assert all(t.done and t.rows > 0 for t in state.tables.values())
