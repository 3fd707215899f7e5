"""Parallel mode's shard transactions as executors run them (`shard_writes.write_shard`),
against the real sink, without Spark: a second attempt of a committed shard writes nothing
(its marker row is the commit), and a shard that fails remotely is written by the driver,
which names the event."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op
from rowbus.spark_apply.exceptions import BadEventError
from rowbus.spark_apply.planner import PlannerState, plan
from rowbus.spark_apply.shard_writes import ShardWrite, write_shard
from tests.conftest import connect
from tests.integration.spark_apply.test_sink import EXPECTED, batch, make_sink, rows_of
from tests.unit.spark_apply.events import resolved, row, table


@pytest.fixture
def sink_db(services: Settings, make_database: Callable[..., str]) -> str:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("CREATE TABLE k (id BIGINT, v VARCHAR(20))")  # keyless: not idempotent
    return db


def test_every_shard_commits_once_whatever_the_attempts(
    services: Settings, unique: Callable[[str], str], sink_db: str
) -> None:
    up, keyless = table("up", "t"), table("up", "k", key=())
    sink = make_sink(
        services, unique, sink_db, {up.schema_id: up, keyless.schema_id: keyless}, "parallel"
    )
    sent: list[list[ShardWrite]] = []

    def twice(writes: list[ShardWrite]) -> None:
        # As Spark may: pickled to the executor, and a task attempted again after it committed.
        writes = pickle.loads(pickle.dumps(writes))
        sent.append(writes)
        for w in writes:
            assert write_shard(w) == w.rows
        for w in writes:
            assert write_shard(w) == 0

    sink.remote = twice
    events = batch(
        *(row(i, Op.INSERT, after=(i, f"v{i}"), tbl=up) for i in range(1, 21)),
        row(21, Op.INSERT, after=(1, "same"), tbl=keyless),
        row(22, Op.INSERT, after=(1, "same"), tbl=keyless),
        row(23, Op.UPDATE, before=(3, "v3"), after=(3, "w3"), tbl=up),
        resolved(30),
    )
    with sink:
        assert sink.apply(0, plan(PlannerState(), events, EXPECTED)) == 23
        assert sink.previous_state(0) is None
        shards = sink.committed_batches()
    assert shards == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
    assert len(sent) == 1 and len(sent[0]) == 3  # every shard went to the executors
    assert sum(w.rows for w in sent[0]) == 22  # 20 keys collapsed + 2 keyless inserts
    expected = [(i, "w3" if i == 3 else f"v{i}") for i in range(1, 21)]
    assert rows_of(services, sink_db) == expected
    assert rows_of(services, sink_db, "k") == [(1, "same"), (1, "same")]


def test_a_shard_failing_on_an_executor_is_written_by_the_driver(
    services: Settings, unique: Callable[[str], str], sink_db: str
) -> None:
    up = table("up", "t")
    sink = make_sink(services, unique, sink_db, {up.schema_id: up}, "parallel")
    tried: list[int] = []

    def remote(writes: list[ShardWrite]) -> None:
        for w in writes:
            tried.append(w.shard)
            write_shard(w)  # the shard holding the bad value fails: nothing of it commits

    sink.remote = remote
    events = batch(
        *(row(i, Op.INSERT, after=(i, "ok"), tbl=up) for i in range(1, 10)),
        row(10, Op.INSERT, after=(10, "x" * 50), tbl=up),  # longer than VARCHAR(20)
        resolved(30),
    )
    with sink, pytest.raises(BadEventError, match=r"topic\[0\]@9 \(binlog bin.000001:"):
        sink.apply(0, plan(PlannerState(), events, EXPECTED))
    assert tried  # the executors were asked first
    # Shards before the failing one committed on the "executor"; the failing one did not.
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{sink_db}_state`.apply_checkpoint")
        assert int(cur.fetchone()[0]) < 3
