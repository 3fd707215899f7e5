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
