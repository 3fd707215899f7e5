"""`rowbus status` reads each part from where the platform keeps it."""

from __future__ import annotations

import io
import json
import time

from confluent_kafka import Producer
from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from rowbus.config import load_settings
from rowbus.protocol.codec import encode
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint
from rowbus.protocol.hlc import compose
from rowbus.protocol.topics import checkpoint_key
from rowbus.status import print_status
from tests.conftest import connect


def test_status_shows_leader_position_watermark_and_apply_checkpoint(services, make_topic, unique):
    topic = make_topic("checkpoints", partitions=1)
    root = f"/{unique('status')}"
    state_db = unique("rowbus_apply")
    control = unique("control")
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": services.kafka.bootstrap_servers},
        zookeeper={"hosts": services.zookeeper.hosts, "root": root},
        sources=[{"name": s.name, "port": s.port} for s in services.sources],
        sink={"port": services.resolved_sink.port},
        reader={"checkpoints_topic": topic},
        apply={
            "job": "status-test",
            "state_database": state_db,
            "shard_ddl": {"control_topic": control},
        },
    )
    ts = compose(int(time.time() * 1000) - 2000, 0)
    checkpoint = ReaderCheckpoint(
        source="source1",
        position=BinlogPosition("binlog.000007", 1234, "1-1-99"),
        gtid_set="1-1-99",
        ts=ts,
        offsets=(),
        reader_id="reader-a",
        epoch=1,
        snapshot=_snapshot_running(),
    )
    value, headers = encode(checkpoint)
    producer = Producer(services.kafka.client_config())
    producer.produce(topic, value, key=checkpoint_key("source1"), headers=headers)
    producer.flush(15)

    zk = KazooClient(hosts=services.zookeeper.hosts)
    zk.start(15)
    lock = Lock(zk, f"{root}/readers/source1/leader", "reader-a")
    assert lock.acquire(timeout=10)
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{state_db}`")
        cur.execute(
            f"CREATE TABLE `{state_db}`.apply_checkpoint (job VARCHAR(128), batch_id BIGINT, "
            "step INT, shard INT, offsets LONGTEXT, watermark BIGINT, row_count INT, "
            "ddl LONGTEXT, committed_at DATETIME(6))"
        )
        cur.execute(
            f"INSERT INTO `{state_db}`.apply_checkpoint VALUES "
            "('status-test', 41, 0, 0, '{}', %s, 10, NULL, NOW(6)), "
            "('status-test', 42, 0, 0, '{}', %s, 7, NULL, NOW(6)), "
            "('other-job', 5, 0, 0, '{}', %s, 3, NULL, NOW(6))",
            (ts - 5, ts, ts - 9),
        )
    try:
        out = io.StringIO()
        assert print_status(settings, out) == 0, out.getvalue()
        text = out.getvalue()
        assert "reader-a" in text
        assert "binlog.000007:1234 gtid=1-1-99" in text
        assert "(no checkpoint)" in text  # source2 has none
        assert "job status-test (configured): batch 42" in text
        assert "7 rows" in text
        assert "job other-job: batch 5" in text, "every job in the state database is shown"
        assert "lag " in text
        assert "snapshot running: 300 rows" in text and "db.t 300/1,000 ETA" in text
        assert f"control topic {control}" in text
        out = io.StringIO()
        assert print_status(settings, out, as_json_lines=True) == 0
        report = json.loads(out.getvalue())
        assert [j["job"] for j in report["jobs"]] == ["other-job", "status-test"]
        assert [j["configured"] for j in report["jobs"]] == [False, True]
        assert report["readers"][0]["leader"] == "reader-a"
        assert report["readers"][0]["snapshot"]["rows"] == 300
        assert report["readers"][1]["snapshot"] is None
        assert report["readers"][0]["lag_ms"] >= 2000
        assert report["control_topic"] == control
        assert report["locks"] == []
        assert report["unavailable"] == {}
    finally:
        lock.release()
        zk.stop()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{state_db}`")


def test_an_unreadable_part_is_reported_not_fatal(services):
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": services.kafka.bootstrap_servers},
        zookeeper={"hosts": services.zookeeper.hosts},
        sources=[{"name": s.name, "port": s.port} for s in services.sources],
        sink={"port": 1},
    )
    out = io.StringIO()
    assert print_status(settings, out) == 3
    assert "apply checkpoint: unavailable (OperationalError" in out.getvalue()
    assert "shard-DDL locks" in out.getvalue()


def _snapshot_running() -> str:
    """A reader's snapshot progress half-way through one table (PROTOCOL.md §9.5)."""
    from rowbus.producer.snapshot.state import SnapshotState
    from rowbus.protocol.events import ColumnSchema, TableSchema

    table = TableSchema("db", "t", (ColumnSchema("id", "bigint"),), ("id",))
    state = SnapshotState.start(BinlogPosition("binlog.000007", 4), [table], {"db.t": 1000})
    state.tables["db.t"].rows = state.seq = 300
    state.started = time.time() - 3
    return state.to_json()


def test_status_shows_the_reader_cluster(services, unique):
    """Nodes (live or only still named by a set, the coordinator, a draining one), each source's
    owner and replication-set state, and the pending moves — in the text and in `--json`."""
    from rowbus.producer.cluster.state import (
        NodeStatus,
        Paths,
        Phase,
        ReplicationSet,
        SetState,
        TaskStatus,
    )

    root = f"/{unique('cluster_status')}"
    paths = Paths(root)
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": services.kafka.bootstrap_servers},
        zookeeper={"hosts": services.zookeeper.hosts, "root": root},
        sources=[{"name": s.name, "port": s.port} for s in services.sources],
        sink={"port": services.resolved_sink.port},
    )
    zk = KazooClient(hosts=services.zookeeper.hosts)
    zk.start(15)
    try:
        n1 = NodeStatus(
            "n1", {"s1": TaskStatus(Phase.REPLICATING, 5), "s2": TaskStatus(Phase.REPLICATING, 6)}
        )
        n2 = NodeStatus("n2", {"s2": TaskStatus(Phase.PREPARED)})
        zk.create(paths.node("n1"), n1.encode(), ephemeral=True, makepath=True)
        zk.create(paths.node("n2"), n2.encode(), ephemeral=True, makepath=True)
        sets = [
            ReplicationSet("s1", SetState.REPLICATING, "n1"),
            ReplicationSet("s2", SetState.COMMIT, "n1", "n2"),
            ReplicationSet("s3", SetState.REPLICATING, "n3"),  # n3 died; not yet rescheduled
        ]
        for s in sets:
            zk.create(paths.set(s.source), s.encode(), makepath=True)
        zk.create(paths.move("s1"), b"n2", makepath=True)
        zk.create(paths.drain("n1"), b"", makepath=True)
        # The coordinator election is kazoo's recipe over a lock: n1 holds it.
        election = Lock(zk, paths.coordinator, "n1")
        assert election.acquire(timeout=10)

        out = io.StringIO()
        print_status(settings, out, as_json_lines=True)
        cluster = json.loads(out.getvalue())["cluster"]
        assert cluster["coordinator"] == "n1"
        nodes = {n["node"]: n for n in cluster["nodes"]}
        assert nodes["n1"] == {
            "node": "n1",
            "live": True,
            "coordinator": True,
            "draining": True,
            "tasks": ["s1", "s2"],
        }
        assert nodes["n2"]["live"] and not nodes["n2"]["coordinator"]
        assert not nodes["n3"]["live"]
        by_source = {s["source"]: s for s in cluster["sets"]}
        assert {k: (v["state"], v["owner"], v["target"]) for k, v in by_source.items()} == {
            "s1": ("replicating", "n1", None),
            "s2": ("commit", "n1", "n2"),
            "s3": ("replicating", "n3", None),
        }
        assert by_source["s1"]["watermark_ts"] == 5
        assert cluster["moves"] == [
            {"source": "s1", "from": "n1", "to": "n2", "state": "replicating", "requested": True},
            {"source": "s2", "from": "n1", "to": "n2", "state": "commit", "requested": False},
        ]

        text = io.StringIO()
        print_status(settings, text)
        screen = text.getvalue()
        assert "reader cluster (coordinator n1)" in screen
        assert "node n1 (coordinator, draining, live): s1, s2" in screen
        assert "node n3 (GONE): -" in screen
        assert "set s2           commit      owner=n1 target=n2" in screen
        assert "2 pending move(s):" in screen
        assert "s1: n1 -> n2 (requested, replicating)" in screen
        election.release()
    finally:
        zk.delete(root, recursive=True)
        zk.stop()


def test_status_without_reader_nodes_shows_no_cluster(services, unique):
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": services.kafka.bootstrap_servers},
        zookeeper={"hosts": services.zookeeper.hosts, "root": f"/{unique('no_cluster')}"},
        sources=[{"name": s.name, "port": s.port} for s in services.sources],
        sink={"port": services.resolved_sink.port},
    )
    out = io.StringIO()
    print_status(settings, out, as_json_lines=True)
    report = json.loads(out.getvalue())
    assert report["cluster"] is None
    assert "cluster" not in report["unavailable"]
