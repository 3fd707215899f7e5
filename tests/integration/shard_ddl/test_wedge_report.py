"""The wedge report on the real control topic (issue 28): the apply job's shard-DDL hook, whose
lock waits for shards of a source that is stopped (they never report) while the watermark
advances, logs one WARNING naming the lock, the missing shards and where they are, and the
lock carries the report where `rowbus status` reads it. The clock is injected (shifted), so
nothing waits for the configured time."""

from __future__ import annotations

import logging
import time

import pytest

from rowbus.config import Settings
from rowbus.merge.positions import Floor
from rowbus.protocol.events import BinlogPosition
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.planner import Envelope, Plan, PlannerState
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.spark_apply.shard_ddl import ShardDdlHook
from rowbus.status import open_locks
from rowbus.testing import events

TABLES = [(s, "up", f"t_{i}") for s in ("s1", "s2") for i in (1, 2)]


def test_a_lock_missing_a_stopped_sources_shards_is_reported_and_shown_by_status(
    services: Settings, make_topic, unique, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic("control", partitions=1)
    sink = services.resolved_sink
    config = JobConfig(
        apply=ApplySettings(
            job=unique("wedge"),
            sources=("s1", "s2"),
            routes=(RouteSettings(match="up.t_*", target="down.t", sharded=True),),
            checkpoint_location=tmp_path / "cp",
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=sink.host, port=sink.port, user=sink.user, password=sink.password),
    )
    shift = [0.0]
    hook = ShardDdlHook(
        config,
        TABLES,
        control_topic=topic,
        actor="job-1",
        wedge_report_s=30,
        clock=lambda: time.time() + shift[0],
    ).start()
    try:
        # source s1's shards reach the DDL; s2 is stopped and never will
        for i, table in enumerate(("t_1", "t_2"), 1):
            ddl = events.ddl(
                (1000 + i) << 16,
                f"ALTER TABLE {table} ADD c INT",
                events.table("up", table, ("id", "v", "c")),
                source="s1",
                position=BinlogPosition("binlog.000007", 100 * i),
            )
            assert not hook.ddl_ready(Envelope("s1", 0, i, ddl))
        state = PlannerState(floors={"s1": Floor((0, 7, "binlog.000007", 4096, 0))})
        hook.after_apply(Plan((), state, 2000 << 16))
        shift[0] += 29
        hook.after_apply(Plan((), state, 3000 << 16))
        assert not hook.wedge.stuck()
        shift[0] += 2
        with caplog.at_level(logging.WARNING, logger="rowbus.spark_apply.shard_ddl"):
            hook.after_apply(Plan((), state, 4000 << 16))
            hook.after_apply(Plan((), state, 5000 << 16))  # once per lock
        lines = [r.getMessage() for r in caplog.records if "down.t#1" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "s2/up.t_1" in lines[0]
        assert "s2/up.t_2" in lines[0]
        assert "advanced" in lines[0]
        assert hook.wedge.stuck() == {"down.t#1"}
    finally:
        hook.close()
    settings = services.model_copy(
        update={
            "apply": services.apply.model_copy(
                update={
                    "shard_ddl": services.apply.shard_ddl.model_copy(
                        update={"control_topic": topic}
                    )
                }
            )
        }
    )
    (lock,) = open_locks(settings)
    assert lock["lock"] == "down.t#1"
    assert "s2/up.t_1" in str(lock["stuck"])
