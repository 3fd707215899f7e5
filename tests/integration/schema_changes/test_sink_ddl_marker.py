"""The sink runs each DDL exactly once by its marker, across a crash on either side of the DDL
(MySQL DDL is not transactional), and never skips a DDL because the column names already match
(TRUNCATE, MODIFY of a length, index changes all run)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from rowbus.config import Settings
from rowbus.protocol.ddl import parse_ddl
from rowbus.protocol.events import BinlogPosition, DdlChange
from rowbus.routing.routes import Router
from rowbus.shard_ddl.executor import DdlExecutor
from rowbus.spark_apply.ddl import SinkDdl
from rowbus.spark_apply.exceptions import BadEventError
from tests.conftest import connect

_offset = iter(range(1000, 10**6, 100))


def ddl(db: str, statement: str) -> DdlChange:
    parsed = parse_ddl(statement, db)
    return DdlChange(
        source="src",
        ts=1,
        schema=db,
        table=parsed.table.table if parsed.table else None,
        statement=statement,
        table_schema=None,
        position=BinlogPosition("bin.000001", next(_offset)),
        kind=parsed.kind,
    )


@pytest.fixture
def sink(services: Settings, unique: Callable[[str], str]) -> Iterator[tuple[SinkDdl, str, Any]]:
    s = services.resolved_sink
    db = unique("db")
    state = unique("state")

    def conn() -> Any:
        return connect(s, autocommit=True)

    with conn() as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, s VARCHAR(4))")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (1, 'abcd'), (2, 'wxyz')")
    try:
        yield SinkDdl(Router([], "identity"), conn, state, "job"), db, conn
    finally:
        with conn() as c, c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"DROP DATABASE IF EXISTS `{state}`")


def query(conn: Callable[[], Any], sql: str) -> list[tuple[Any, ...]]:
    with conn() as c, c.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_truncate_and_modify_run_although_column_names_match(sink: Any) -> None:
    applier, db, conn = sink
    assert applier.apply(ddl(db, "TRUNCATE TABLE t"))
    assert query(conn, f"SELECT * FROM `{db}`.t") == []
    assert applier.apply(ddl(db, "ALTER TABLE t MODIFY s VARCHAR(8)"))
    (row,) = query(conn, f"SHOW CREATE TABLE `{db}`.t")
    assert "varchar(8)" in row[1]
    assert applier.apply(ddl(db, "ALTER TABLE t ADD UNIQUE KEY us (s)"))
    (row,) = query(conn, f"SHOW CREATE TABLE `{db}`.t")
    assert "UNIQUE KEY `us`" in row[1]


def test_a_replayed_ddl_runs_once(sink: Any) -> None:
    applier, db, conn = sink
    truncate = ddl(db, "TRUNCATE TABLE t")
    assert applier.apply(truncate)
    with conn() as c, c.cursor() as cur:
        cur.execute(f"INSERT INTO `{db}`.t VALUES (3, 'new')")  # a row after the TRUNCATE
    assert not applier.apply(truncate)  # the batch replays: the marker says done
    assert query(conn, f"SELECT id FROM `{db}`.t") == [(3,)]


def test_crash_after_the_ddl_before_its_marker_is_done(
    sink: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    applier, db, conn = sink
    add = ddl(db, "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7")

    def crash(self: DdlExecutor, cur: Any, lock_id: str) -> None:
        raise pymysql.err.OperationalError(2013, "lost connection (simulated crash)")

    with monkeypatch.context() as m:
        m.setattr(DdlExecutor, "_mark_done", crash)
        with pytest.raises(Exception, match="simulated crash"):
            applier.apply(add)
    # the DDL ran, its marker says executing: the replay sees a changed definition
    assert not applier.apply(add)
    assert query(conn, f"SELECT c FROM `{db}`.t ORDER BY id") == [(7,), (7,)]


def test_crash_after_the_intent_before_the_ddl(sink: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    applier, db, conn = sink
    add = ddl(db, "ALTER TABLE t ADD COLUMN c INT")
    real_execute = pymysql.cursors.Cursor.execute

    def crash_on_alter(self: Any, sql: str, args: Any = None) -> Any:
        if sql.startswith("ALTER TABLE"):
            raise pymysql.err.OperationalError(2013, "lost connection (simulated crash)")
        return real_execute(self, sql, args)

    with monkeypatch.context() as m:
        m.setattr(pymysql.cursors.Cursor, "execute", crash_on_alter)
        with pytest.raises(Exception, match="simulated crash"):
            applier.apply(add)
    # intent written, DDL not run: the definition is unchanged, so the replay runs it
    assert applier.apply(add)
    assert [r[0] for r in query(conn, f"SHOW COLUMNS FROM `{db}`.t")] == ["id", "s", "c"]


def test_rename_of_several_tables_and_create_like(sink: Any) -> None:
    applier, db, conn = sink
    assert applier.apply(ddl(db, "CREATE TABLE u LIKE t"))
    assert applier.apply(ddl(db, "RENAME TABLE t TO t2, u TO u2"))
    names = {r[0] for r in query(conn, f"SHOW TABLES FROM `{db}`")}
    assert names == {"t2", "u2"}
    assert applier.apply(ddl(db, "DROP TABLE t2, u2"))
    assert query(conn, f"SHOW TABLES FROM `{db}`") == []


def test_a_ddl_runs_under_the_source_sessions_sql_mode(
    sink: tuple[SinkDdl, str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A lenient source session's MODIFY truncated the table's values: the STRICT sink does the
    same under that mode, refuses it without one, and leaves out a mode it does not know."""
    sink_ddl, db, conn = sink
    strict = ddl(db, "ALTER TABLE t MODIFY s VARCHAR(2)")
    with pytest.raises(BadEventError, match="Data truncated"):
        sink_ddl.apply(strict)
    lenient = replace(
        ddl(db, "ALTER TABLE t MODIFY s VARCHAR(2)"), sql_mode="NO_SUCH_MODE,NO_ENGINE_SUBSTITUTION"
    )
    assert sink_ddl.apply(lenient)
    assert query(conn, f"SELECT id, s FROM `{db}`.t ORDER BY id") == [(1, "ab"), (2, "wx")]
    assert any("does not know sql_mode NO_SUCH_MODE" in r.getMessage() for r in caplog.records)


def test_a_ddl_runs_at_the_source_statements_time(sink: tuple[SinkDdl, str, Any]) -> None:
    """A column added with DEFAULT CURRENT_TIMESTAMP(6) holds, in the rows the table had, the
    moment the source ran the ALTER, not the moment the sink runs it."""
    sink_ddl, db, conn = sink
    when = 1_700_000_000_123_456
    add = replace(
        ddl(db, "ALTER TABLE t ADD COLUMN at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"),
        timestamp_us=when,
    )
    assert sink_ddl.apply(add)
    got = query(conn, f"SELECT id, UNIX_TIMESTAMP(at) FROM `{db}`.t ORDER BY id")
    assert [(i, int(t * 1_000_000)) for i, t in got] == [(1, when), (2, when)]


def test_a_ddl_runs_in_the_source_sessions_time_zone(sink: tuple[SinkDdl, str, Any]) -> None:
    """A DATETIME added with DEFAULT CURRENT_TIMESTAMP holds, in the rows the table had, the
    statement's moment in the source session's zone (protocol 1.5), not the sink's."""
    sink_ddl, db, conn = sink
    add = replace(
        ddl(db, "ALTER TABLE t ADD COLUMN d DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP"),
        timestamp_us=1_700_000_000_000_000,
        time_zone="+05:30",
    )
    assert sink_ddl.apply(add)
    got = query(conn, f"SELECT id, CAST(d AS CHAR) FROM `{db}`.t ORDER BY id")
    assert got == [(1, "2023-11-15 03:43:20"), (2, "2023-11-15 03:43:20")]
