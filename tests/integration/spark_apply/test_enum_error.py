"""The ENUM error value written by a STRICT sink (real MariaDB): kept exactly (index 0), while
every other value STRICT refuses is still refused, in the same statement or alone."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from rowbus.config import Settings
from rowbus.routing.routes import Target
from rowbus.spark_apply.enum_error import upsert
from rowbus.spark_apply.literals import as_literals
from tests.conftest import connect


@pytest.fixture
def strict_cursor(services: Settings, make_database: Any) -> Any:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO'")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b'), s VARCHAR(2))")
        yield db, cur
        conn.rollback()


def test_the_enum_error_value_is_written_as_index_0(strict_cursor: Any) -> None:
    db, cur = strict_cursor
    rows = [(1, "a", "x"), (2, "", "y"), (3, "b", None)]
    upsert(cur, Target(db, "t"), ("id", "e", "s"), ("id",), list(map(as_literals, rows)), 1 << 20)
    cur.execute("SELECT id, e, e + 0, s FROM t ORDER BY id")
    assert cur.fetchall() == ((1, "a", 1, "x"), (2, "", 0, "y"), (3, "b", 2, None))


@pytest.mark.parametrize(
    "row",
    [
        (4, "", "too long"),  # the ENUM error value beside a value STRICT refuses
        (5, "c", "z"),  # a member the sink's ENUM lacks (drift): never silently ''
    ],
)
def test_other_truncations_are_still_refused(strict_cursor: Any, row: tuple[Any, ...]) -> None:
    db, cur = strict_cursor
    with pytest.raises(pymysql.err.MySQLError):
        upsert(cur, Target(db, "t"), ("id", "e", "s"), ("id",), [as_literals(row)], 1 << 20)
    cur.execute("SELECT COUNT(*) FROM t")
    assert cur.fetchone() == (0,)
