"""kill -9 of a subscriber mid-stream, then a restart, for the Kafka-offsets, ZooKeeper and SQL
checkpoint stores (the file store's test drives `rowbus tail`, in test_subscriber.py): nothing
is lost, and nothing is delivered twice beyond what the store's guarantee allows — at least
once: only transactions after the saved checkpoint; exactly once (SQL, written inside the
handler's transaction): nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.consumers.stores import (
    CheckpointStore,
    Guarantee,
    KafkaOffsetStore,
    SqlCheckpointStore,
    ZooKeeperStore,
)
from rowbus.merge.checkpoint import Checkpoint
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.consumers.publisher import publish_in_background
from tests.integration.consumers.test_subscriber import reference

ROOT = Path(__file__).resolve().parents[3]
TOTAL = 200


@pytest.mark.parametrize("kind", ["kafka", "zookeeper", "sql"])
def test_subscriber_resumes_after_kill_9_within_its_stores_guarantee(
    kind: str,
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    sources = [make_topic("a"), make_topic("b")]
    sink = services.resolved_sink
    database = make_database(sink)
    with connect(sink, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE applied (txn VARCHAR(64), id BIGINT, PRIMARY KEY (txn, id))")
    spec: dict[str, Any] = {
        "store": kind,
        "bootstrap": services.kafka.bootstrap_servers,
        "zookeeper": services.zookeeper.hosts,
        "path": f"/rowbus-test/{unique('tail')}/point",
        "group": unique("group"),
        "sources": sources,
        "checkpoints": make_topic("ckpt", partitions=1),
        "schemas": make_topic("schemas", partitions=1),
        "db": {
            "host": sink.host,
            "port": sink.port,
            "user": sink.user,
            "password": sink.password.get_secret_value(),
            "database": database,
        },
    }

    def store() -> CheckpointStore:
        if kind == "kafka":
            return KafkaOffsetStore(
                services.kafka.client_config(), group_id=spec["group"], topics=tuple(sources)
            )
        if kind == "zookeeper":
            return ZooKeeperStore(spec["path"], hosts=spec["zookeeper"])
        return SqlCheckpointStore(lambda: connect(sink, database, autocommit=False), name="tail")

    def subscriber(out: Path, **extra: Any) -> subprocess.Popen[bytes]:
        with out.open("wb") as f:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.consumers.subscriber_proc",
                    json.dumps({**spec, **extra}),
                ],
                cwd=ROOT,
                env=dict(os.environ),
                stdout=f,
            )

    def saved() -> Checkpoint | None:
        with store() as s:
            return s.load()

    writer = publish_in_background(services, sources, TOTAL)
    first_out = tmp_path / "first.jsonl"
    first = subscriber(first_out)
    try:
        wait_for(
            lambda: first_out.read_bytes().count(b"\n") >= 100 and saved() is not None,
            timeout=90,
            what="the first subscriber to handle 100 transactions and save a checkpoint",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        writer.join(90)
    assert not writer.is_alive()
    point = saved()
    assert point is not None
    second_out = tmp_path / "second.jsonl"
    second = subscriber(second_out, idle_timeout=3)
    assert second.wait(120) == 0

    def ids(path: Path) -> list[tuple[str, int]]:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        return [(r["txn"], r["ts"]) for r in lines]

    before, after = ids(first_out), ids(second_out)
    # the last transaction of the last source waits for a watermark that never comes
    everything = reference(sources, TOTAL)[:-1]
    # no loss: the restart delivered exactly what comes after the saved checkpoint, in order
    assert after == [(i, ts) for i, ts in everything if ts > point.ts]
    assert before == everything[: len(before)]
    again = set(before) & set(after)
    # duplicates only after the checkpoint (at least once), or none at all (exactly once)
    assert all(ts > point.ts for _, ts in again)
    if store().guarantee is Guarantee.EXACTLY_ONCE:
        # a transaction is printed only once committed with its checkpoint, so none is printed
        # twice; and the sink holds every row of every transaction exactly once
        with connect(sink, database) as conn, conn.cursor() as cur:
            cur.execute("SELECT txn, COUNT(*) FROM applied GROUP BY txn")
            counts = dict(cur.fetchall())
        assert counts == {i: 3 for i, _ in everything}
        assert not again
