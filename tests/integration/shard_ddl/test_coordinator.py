"""Coordinators on the real control topic, ZooKeeper and sink."""

from __future__ import annotations

import json

from rowbus.cli import main
from rowbus.config import Settings
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockState
from rowbus.testing import shard_routes
from tests.conftest import connect
from tests.integration.shard_ddl.helpers import columns, coordinator, election, executor


def _groups(db: str) -> ShardGroups:
    tables = [(s, "up", f"t_{i}") for s in ("s1", "s2") for i in (1, 2)]
    return ShardGroups.build(shard_routes([("up.t_*", f"{db}.t")]), tables)


def _target(services: Settings, make_database) -> str:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)")
    return db


def test_two_jobs_one_coordinator_execute_once_and_a_restart_rebuilds(
    services: Settings, make_topic, make_database, unique
) -> None:
    topic = make_topic("control", partitions=1)
    db = _target(services, make_database)
    groups = _groups(db)
    name = unique("grp")
    state_db = unique("rowbus_ddl")
    e1, e2 = election(services, name, "job-1"), election(services, name, "job-2")
    job1 = coordinator(
        services, topic, "job-1", groups, execute=executor(services, state_db), elect=e1
    )
    job2 = coordinator(
        services, topic, "job-2", groups, execute=executor(services, state_db), elect=e2
    )
    try:
        assert e2.holder() is None
        assert e1.is_leader()
        assert not e2.is_leader()
        assert e2.holder() == "job-1"
        lock = job1.report("s1", "up", "t_1", "ALTER TABLE t_1 ADD c INT", ts=100 << 16)
        assert lock == f"{db}.t#1"
        assert job1.report("s1", "up", "t_1", "ALTER TABLE t_1 ADD c INT", ts=100 << 16) == lock
        job1.report("s1", "up", "t_2", "alter table up.t_2 add c int", ts=101 << 16)
        job2.report("s2", "up", "t_1", "ALTER TABLE `t_1` ADD `c` INT", ts=102 << 16)
        job1.step(0.2)
        job2.step(0.2)
        assert job2.table.get(lock).state is LockState.WAITING  # type: ignore[union-attr]
        assert job2.table.get(lock).waiting_for == ("s2/up.t_2",)  # type: ignore[union-attr]
        assert [c for c, _ in columns(services.resolved_sink, db, "t")] == ["id", "v"]
        job2.report("s2", "up", "t_2", "ALTER TABLE t_2 ADD c INT", ts=103 << 16)
        job2.wait(lambda t: t.get(lock).state is LockState.READY, 10, "READY")  # type: ignore[union-attr]
        # job2 is not the coordinator: it never executes
        job2.step(0.1)
        assert job2.table.get(lock).state is LockState.READY  # type: ignore[union-attr]
        job1.wait(lambda t: t.get(lock).state is LockState.DONE, 15, "DONE")  # type: ignore[union-attr]
        job2.wait(lambda t: t.get(lock).released_for("s2/up.t_2"), 15, "release")  # type: ignore[union-attr]
        assert [c for c, _ in columns(services.resolved_sink, db, "t")] == ["id", "v", "c"]
        done = job1.table.get(lock)
        assert done is not None
        assert done.latency_ms is not None
        assert done.latency_ms >= 0
        # a restarted job rebuilds the same table from the topic
        job3 = coordinator(services, topic, "job-3", groups)
        try:
            assert job3.table.get(lock) == job1.table.get(lock)
        finally:
            job3.close()
    finally:
        for c in (job1, job2):
            c.close()
        e1.close()
        e2.close()


def test_executor_is_idempotent_across_a_crash_between_ddl_and_marker(
    services: Settings, make_database, unique
) -> None:
    db = _target(services, make_database)
    state_db = unique("rowbus_ddl")
    ex = executor(services, state_db)
    stmt = f"ALTER TABLE `{db}`.`t` ADD c INT"
    assert ex.execute("L#1", f"{db}.t", stmt).executed
    assert not ex.execute("L#1", f"{db}.t", stmt).executed
    # simulate a crash after the DDL ran but before the marker said done
    stmt2 = f"ALTER TABLE `{db}`.`t` ADD d INT"
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW CREATE TABLE `{db}`.`t`")
        before = cur.fetchone()[1]
        cur.execute(
            f"INSERT INTO `{state_db}`.shard_ddl_applied (lock_id, statement, state, "
            "before_definition) VALUES ('L#2', %s, 'executing', %s)",
            (stmt2, before),
        )
        cur.execute(stmt2)
    assert not ex.execute("L#2", f"{db}.t", stmt2).executed
    # and a crash before the DDL ran: it runs now
    stmt3 = f"ALTER TABLE `{db}`.`t` ADD e INT"
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"SHOW CREATE TABLE `{db}`.`t`")
        before = cur.fetchone()[1]
        cur.execute(
            f"INSERT INTO `{state_db}`.shard_ddl_applied (lock_id, statement, state, "
            "before_definition) VALUES ('L#3', %s, 'executing', %s)",
            (stmt3, before),
        )
    assert ex.execute("L#3", f"{db}.t", stmt3).executed
    assert [c for c, _ in columns(services.resolved_sink, db, "t")] == ["id", "v", "c", "d", "e"]
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{state_db}`")


def test_conflict_is_listed_by_the_cli_and_resolved_by_an_operator(
    services: Settings, make_topic, make_database, unique, capsys, monkeypatch
) -> None:
    topic = make_topic("control", partitions=1)
    db = _target(services, make_database)
    groups = _groups(db)
    state_db = unique("rowbus_ddl")
    job = coordinator(services, topic, "job-1", groups, execute=executor(services, state_db))
    try:
        for i, (s, t) in enumerate([("s1", "t_1"), ("s1", "t_2"), ("s2", "t_1"), ("s2", "t_2")]):
            typ = "DECIMAL(20,0)" if (s, t) == ("s2", "t_1") else "BIGINT"
            job.report(s, "up", t, f"ALTER TABLE {t} MODIFY v {typ}", ts=(200 + i) << 16)
        lock = f"{db}.t#1"
        job.wait(lambda t: any(e.kind == "conflict" for e in t.get(lock).history), 10, "CONFLICT")  # type: ignore[union-attr]
        state = job.table.get(lock)
        assert state is not None
        assert state.state is LockState.CONFLICT
        assert "s2/up.t_1" in (state.cause or "")
        assert columns(services.resolved_sink, db, "t")[1] == ("v", "int(11)")
        monkeypatch.setenv("ROWBUS_KAFKA__BOOTSTRAP_SERVERS", services.kafka.bootstrap_servers)
        capsys.readouterr()
        assert main(["ddl-locks", "--topic", topic, "list"]) == 0
        listed = capsys.readouterr().out
        assert lock in listed
        assert "CONFLICT: s2/up.t_1 reports" in listed
        assert "DECIMAL(20, 0)" in listed
        # unlocking a conflict without saying what to run is refused
        assert main(["ddl-locks", "--topic", topic, "unlock", lock]) == 2
        assert "--statement" in capsys.readouterr().err
        assert (
            main(
                [
                    "ddl-locks",
                    "--topic",
                    topic,
                    "unlock",
                    lock,
                    "--use-shard",
                    "s1/up.t_1",
                    "--reason",
                    "BIGINT wins",
                ]
            )
            == 0
        )
        assert "unlocked" in capsys.readouterr().out
        job.wait(lambda t: t.get(lock).state is LockState.DONE, 15, "DONE after unlock")  # type: ignore[union-attr]
        assert columns(services.resolved_sink, db, "t")[1] == ("v", "bigint(20)")
        assert all(job.table.get(lock).released_for(s) for s in groups.group(f"{db}.t"))  # type: ignore[union-attr]
        assert main(["ddl-locks", "--topic", topic, "show", lock]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["state"] == "done"
        assert [h[0] for h in shown["history"]][-3:] == ["conflict", "unlock", "done"]
        assert shown["history"][-2][1].startswith("operator:")
        # the operator's action is on the topic: a fresh reader sees it
        assert main(["ddl-locks", "--topic", topic, "list"]) == 0
        assert "no unresolved" in capsys.readouterr().out
    finally:
        job.close()


def test_optimistic_mode_applies_a_compatible_ddl_at_first_sight(
    services: Settings, make_topic, make_database, unique
) -> None:
    topic = make_topic("control", partitions=1)
    db = _target(services, make_database)
    groups = _groups(db)
    job = coordinator(
        services,
        topic,
        "job-1",
        groups,
        execute=executor(services, unique("rowbus_ddl")),
        optimistic=True,
    )
    try:
        lock = job.report("s1", "up", "t_1", "ALTER TABLE t_1 MODIFY v BIGINT", ts=300 << 16)
        state = job.table.get(lock)
        assert state is not None
        assert state.mode == "optimistic"
        job.wait(lambda t: t.get(lock).state is LockState.DONE, 10, "DONE at first sight")  # type: ignore[union-attr]
        assert columns(services.resolved_sink, db, "t")[1] == ("v", "bigint(20)")
        # the others pass when they report the same DDL
        job.report("s1", "up", "t_2", "ALTER TABLE t_2 MODIFY v BIGINT", ts=301 << 16)
        assert job.released(lock, "s1/up.t_2")
        # a DROP is never optimistic: it waits for every shard
        lock2 = job.report("s1", "up", "t_1", "ALTER TABLE t_1 DROP v", ts=302 << 16)
        job.step(0.1)
        assert job.table.get(lock2).mode == "pessimistic"  # type: ignore[union-attr]
        assert job.table.get(lock2).state is LockState.WAITING  # type: ignore[union-attr]
    finally:
        job.close()
