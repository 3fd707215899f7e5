"""The MySQL sink against the real sink server, without Spark: upserts, deletes, key changes,
replays, DDL steps and bad events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal

import pymysql
import pytest

from rowbus.config import Settings
from rowbus.protocol.events import Op, TableSchema
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.exceptions import BadEventError
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.sink import MySQLSink
from tests.conftest import connect
from tests.unit.spark_apply.events import ddl, resolved, row, table

T = "topic"
EXPECTED = [(T, 0, "s1")]


def sink_connection(settings: Settings) -> SinkConnection:
    s = settings.resolved_sink
    return SinkConnection(host=s.host, port=s.port, user=s.user, password=s.password)


def rows_of(settings: Settings, db: str, tbl: str = "t") -> list[tuple[object, ...]]:
    with connect(settings.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{tbl}` ORDER BY 1")
        return list(cur.fetchall())


@pytest.fixture
def sink_db(services: Settings, make_database: Callable[..., str]) -> str:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    return db


def make_sink(
    services: Settings,
    unique: Callable[[str], str],
    db: str,
    schemas: dict[int, TableSchema],
    mode: str = "snapshot",
) -> MySQLSink:
    router = Router([RouteSettings(match="up.*", target=f"{db}.{{table}}")], unrouted="error")
    return MySQLSink(
        sink_connection(services),
        unique("job"),
        f"{db}_state",
        router,
        schemas.get,
        mode=mode,
        parallelism=3,
    )


def batch(*events: object) -> list[Envelope]:
    return [Envelope(T, 0, i, e) for i, e in enumerate(events)]  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["snapshot", "parallel"])
def test_rows_collapse_and_replays_are_skipped(
    services: Settings, unique: Callable[[str], str], sink_db: str, mode: str
) -> None:
    up = table("up", "t")
    sink = make_sink(services, unique, sink_db, {up.schema_id: up}, mode)
    events = batch(
        row(1, Op.INSERT, after=(1, "a"), tbl=up),
        row(2, Op.INSERT, after=(2, "b"), tbl=up),
        row(3, Op.UPDATE, before=(1, "a"), after=(1, "a2"), tbl=up),
        row(4, Op.UPDATE, before=(2, "b"), after=(5, "b"), tbl=up),  # key change
        row(5, Op.INSERT, after=(3, "c"), tbl=up),
        row(6, Op.DELETE, before=(3, "c"), tbl=up),
        row(7, Op.INSERT, after=(4, "d"), tbl=up),
        resolved(6),
    )
    with sink:
        prev = sink.previous_state(0)
        assert prev == PlannerState()
        p = plan(prev, events, EXPECTED)
        assert sink.apply(0, p) == 6
        assert rows_of(services, sink_db) == [(1, "a2"), (5, "b")]
        assert sink.previous_state(0) is None  # committed: a replay is skipped
        assert sink.apply(0, p) == 0
        p1 = plan(
            sink.previous_state(1) or PlannerState(),
            [Envelope(T, 0, 8, resolved(8))],
            EXPECTED,
        )
        sink.apply(1, p1)
        assert rows_of(services, sink_db) == [(1, "a2"), (4, "d"), (5, "b")]
        batches = [b for b, _, _ in sink.committed_batches()]
        assert sorted(set(batches)) == [0, 1]


def test_ddl_is_applied_between_rows(
    services: Settings, unique: Callable[[str], str], sink_db: str
) -> None:
    up, up2 = table("up", "t"), table("up", "t", ("id", "v", "w"))
    sink = make_sink(services, unique, sink_db, {up.schema_id: up, up2.schema_id: up2})
    events = batch(
        row(1, Op.INSERT, after=(1, "a"), tbl=up),
        ddl(2, "ALTER TABLE `up`.`t` ADD COLUMN w INT", up2),
        row(3, Op.INSERT, after=(2, "b", 7), tbl=up2),
        row(4, Op.UPDATE, before=(1, "a", None), after=(1, "a", 1), tbl=up2),
        resolved(9),
    )
    with sink:
        p = plan(sink.previous_state(0) or PlannerState(), events, EXPECTED)
        assert len(p.steps) == 2
        sink.apply(0, p)
        assert rows_of(services, sink_db) == [(1, "a", 1), (2, "b", 7)]
        assert [s for _, s, _ in sink.committed_batches()] == [0, 1]


def test_a_bad_event_stops_the_batch_with_its_position(
    services: Settings, unique: Callable[[str], str], sink_db: str
) -> None:
    up = table("up", "t")
    missing = table("up", "nope")
    sink = make_sink(services, unique, sink_db, {up.schema_id: up, missing.schema_id: missing})
    with sink:
        bad_type = batch(
            row(1, Op.INSERT, after=(1, "ok"), tbl=up),
            row(2, Op.INSERT, after=(2, "x" * 50), tbl=up),  # longer than VARCHAR(20)
            resolved(9),
        )
        with pytest.raises(BadEventError, match=r"topic\[0\]@1 \(binlog bin.000001:20\)"):
            sink.apply(0, plan(PlannerState(), bad_type, EXPECTED))
        no_table = batch(
            row(1, Op.INSERT, after=(1, "ok"), tbl=up),
            row(2, Op.INSERT, after=(2, "x"), tbl=missing),
            resolved(9),
        )
        with pytest.raises(BadEventError, match=r"@1 .*missing target table"):
            sink.apply(0, plan(PlannerState(), no_table, EXPECTED))
        assert rows_of(services, sink_db) == []
        assert sink.committed_batches() == []
        assert sink.head() is None
    with pytest.raises(pymysql.err.ProgrammingError):
        rows_of(services, sink_db, "nope")


def test_a_step_in_chunks_is_one_transaction(
    services: Settings, unique: Callable[[str], str], sink_db: str
) -> None:
    """A step written chunk by chunk (pipelined: a chunk is written while the next is
    collapsed) commits whole or not at all, also when a later chunk meets a target whose keys
    the sink looks up then: that lookup once ended the step's open transaction."""
    up, up_u = table("up", "t"), table("up", "u")
    with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE u (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    sink = make_sink(services, unique, sink_db, {up.schema_id: up, up_u.schema_id: up_u})
    sink.chunk_rows = 1
    first = (
        row(1, Op.INSERT, after=(1, "ok"), tbl=up),
        row(2, Op.INSERT, after=(1, "ok"), tbl=up_u),
    )
    events = batch(
        *first,
        row(3, Op.INSERT, after=(2, "x" * 50), tbl=up),  # longer than VARCHAR(20)
        resolved(9),
    )
    with sink:
        with pytest.raises(BadEventError, match=r"topic\[0\]@2"):
            sink.apply(0, plan(PlannerState(), events, EXPECTED))
        assert rows_of(services, sink_db) == []
        assert rows_of(services, sink_db, "u") == []
        assert sink.head() is None
        good = batch(*first, row(3, Op.INSERT, after=(2, "y"), tbl=up), resolved(9))
        assert sink.apply(0, plan(PlannerState(), good, EXPECTED)) == 3
    assert rows_of(services, sink_db) == [(1, "ok"), (2, "y")]
    assert rows_of(services, sink_db, "u") == [(1, "ok")]


def test_every_value_type_round_trips(
    services: Settings, unique: Callable[[str], str], make_database: Callable[..., str]
) -> None:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, f DOUBLE, d DECIMAL(20,4), "
            "s TEXT, b VARBINARY(8), dd DATE, t DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6), "
            "st SET('a','b','c'), n INT)"
        )
    names = ("id", "f", "d", "s", "b", "dd", "t", "ts", "tm", "st", "n")
    up = table("up", "t", names)
    utc = dt.UTC
    values = (
        2**64 - 1,
        -1.5e-300,
        Decimal("-1234567890123456.0001"),
        "it's \\ 'quoted'\n\x00 žluť 🐍 %s %%",
        b"\x00'\\\xff",
        dt.date(1000, 1, 1),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2024, 3, 1, 12, 0, 0, 5, tzinfo=utc),
        -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
        frozenset({"c", "a"}),
        None,
    )
    sink = make_sink(services, unique, db, {up.schema_id: up})
    with sink:
        sink.apply(
            0,
            plan(
                PlannerState(),
                batch(row(1, Op.INSERT, after=values, tbl=up), resolved(2)),
                EXPECTED,
            ),
        )
    [got] = rows_of(services, db)
    assert got[:7] == values[:7]
    assert got[7] == values[7].replace(tzinfo=None)  # the test connection's time zone is UTC
    assert got[8:] == (values[8], "a,c", None)


def test_create_table_makes_a_missing_target_database(
    services: Settings, unique: Callable[[str], str]
) -> None:
    db = unique("absent")  # neither the database nor the table exists in the sink yet
    up = table("up", "t")
    sink = make_sink(services, unique, db, {up.schema_id: up})
    events = batch(
        ddl(1, "CREATE TABLE IF NOT EXISTS `up`.`t` (id BIGINT PRIMARY KEY, v VARCHAR(20))", up),
        row(2, Op.INSERT, after=(1, "a"), tbl=up),
        resolved(9),
    )
    try:
        with sink:
            sink.apply(0, plan(PlannerState(), events, EXPECTED))
        assert rows_of(services, db) == [(1, "a")]
    finally:
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}_state`")
