"""One behaviour suite, run against every checkpoint store backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.consumers.exceptions import CheckpointError
from rowbus.consumers.stores import (
    CheckpointStore,
    FileCheckpointStore,
    Guarantee,
    KafkaOffsetStore,
    SqlCheckpointStore,
    ZooKeeperStore,
)
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.positions import Floor
from tests.conftest import connect

BACKENDS = ["file", "kafka", "zookeeper", "sql"]


@pytest.fixture(params=BACKENDS)
def make_store(
    request: pytest.FixtureRequest,
    services: Settings,
    tmp_path: Path,
    unique: Callable[[str], str],
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
) -> Iterator[Callable[[], CheckpointStore]]:
    """A factory of stores that all see the same stored checkpoint (a restart's view)."""
    backend = request.param
    if backend == "file":
        path = tmp_path / "sub" / "checkpoint.json"
        yield lambda: FileCheckpointStore(path)
    elif backend == "kafka":
        topic = make_topic("ckpt", partitions=2)
        group = unique("group")
        request.node.topic = topic
        yield lambda: KafkaOffsetStore(
            services.kafka.client_config(), group_id=group, topics=(topic,)
        )
    elif backend == "zookeeper":
        path = f"/rowbus-test/{unique('storage')}/shard-0"
        assert services.zookeeper.hosts is not None
        hosts = services.zookeeper.hosts
        yield lambda: ZooKeeperStore(path, hosts=hosts)
    else:
        sink = services.resolved_sink
        db = make_database(sink)
        yield lambda: SqlCheckpointStore(lambda: connect(sink, db, autocommit=False), name="sub")


def checkpoint(request: pytest.FixtureRequest, offset: int, position: int) -> Checkpoint:
    topic = getattr(request.node, "topic", "rowbus.source1")
    return Checkpoint(
        offsets={(topic, 0): offset, (topic, 1): offset + 1},
        floors={
            "source1": Floor(position=(0, 1, "bin.000001", position, 0)),
            "source2": Floor(ts=9),
        },
        watermarks={(topic, 0, "source1"): (100 + offset, offset - 1)},
        ts=100 + offset,
    )


def test_empty_store_has_no_checkpoint(make_store: Callable[[], CheckpointStore]) -> None:
    with make_store() as store:
        assert store.load() is None


def test_saved_checkpoint_survives_a_restart(
    make_store: Callable[[], CheckpointStore], request: pytest.FixtureRequest
) -> None:
    first, second = checkpoint(request, 5, 400), checkpoint(request, 9, 800)
    with make_store() as store:
        store.save(first)
        store.save(second)
    with make_store() as again:
        assert again.load() == second


def test_checkpoint_never_moves_backwards(
    make_store: Callable[[], CheckpointStore], request: pytest.FixtureRequest
) -> None:
    with make_store() as store:
        store.save(checkpoint(request, 9, 800))
    with make_store() as again:
        again.load()
        with pytest.raises(CheckpointError, match="back"):
            again.save(checkpoint(request, 5, 400))
        assert again.load() == checkpoint(request, 9, 800)


def test_guarantee_is_declared(make_store: Callable[[], CheckpointStore]) -> None:
    store = make_store()
    expected = Guarantee.EXACTLY_ONCE if isinstance(store, SqlCheckpointStore) else None
    assert store.guarantee in Guarantee
    if expected:
        assert store.guarantee is expected


def test_sql_store_writes_inside_the_users_transaction(
    services: Settings, make_database: Callable[..., str]
) -> None:
    sink = services.resolved_sink
    db = make_database(sink)
    with connect(sink, db) as setup, setup.cursor() as cur:
        cur.execute("CREATE TABLE target (id INT PRIMARY KEY)")
    store = SqlCheckpointStore(lambda: connect(sink, db, autocommit=False), name="s")
    first = Checkpoint(offsets={("t", 0): 3}, ts=3)
    with store, connect(sink, db, autocommit=False) as conn:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO target VALUES (1)")
        store.save_in(conn, first)
        conn.rollback()  # the handler failed: neither the row nor the checkpoint stays
        assert store.load() is None
        with conn.cursor() as cur:
            cur.execute("INSERT INTO target VALUES (1)")
        store.save_in(conn, first)
        conn.commit()
        assert store.load() == first
        # replaying the same transaction is refused before it could apply twice
        with pytest.raises(CheckpointError):
            store.save_in(conn, Checkpoint(offsets={("t", 0): 2}, ts=2))
        conn.rollback()


def test_kafka_store_compresses_many_lanes_and_refuses_what_still_does_not_fit(
    services: Settings, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:

    topic = make_topic("ckpt", partitions=2)
    group = unique("group")
    lanes = {(topic, p, f"source-{s:03d}"): (1_000_000 + s, 7) for p in (0, 1) for s in range(150)}
    big = Checkpoint(
        offsets={(topic, 0): 5, (topic, 1): 6},
        floors={f"source-{s:03d}": Floor(ts=s) for s in range(150)},
        watermarks=lanes,
        ts=9,
    )
    assert len(big.to_json()) > 4096
    config = services.kafka.client_config()
    with KafkaOffsetStore(config, group_id=group, topics=(topic,)) as store:
        store.save(big)
    with KafkaOffsetStore(config, group_id=group, topics=(topic,)) as again:
        assert again.load() == big
        noise = {f"{os.urandom(24).hex()}": Floor(ts=10) for _ in range(200)}
        with pytest.raises(CheckpointError, match=r"offset\.metadata\.max\.bytes"):
            again.save(Checkpoint(big.offsets, {**big.floors, **noise}, big.watermarks, ts=10))
