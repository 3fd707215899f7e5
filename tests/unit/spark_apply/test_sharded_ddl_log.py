"""What the job logs of a sharded table's DDL: the kinds shard coordination applies (ALTER
TABLE, CREATE/DROP INDEX) are said to be coordinated, at INFO; the others are really not
applied, with a WARNING that says which kinds are. Until 2026-11-27 every shard's ALTER was
logged as "not applied downstream" while the coordination applied it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.ddl import SinkDdl
from tests.unit.spark_apply.events import ddl, table


def _sink_ddl() -> SinkDdl:
    def no_connection() -> Any:
        raise AssertionError("planning a DDL does not connect")

    router = Router([RouteSettings(match="db.t_*", target="sink.t", sharded=True)])
    return SinkDdl(router, no_connection, "rowbus_ddl", "job")


@pytest.mark.parametrize(
    ("statement", "level", "says"),
    [
        ("ALTER TABLE t_1 ADD COLUMN note VARCHAR(20)", logging.INFO, "is coordinated"),
        ("CREATE INDEX i ON t_1 (v)", logging.INFO, "is coordinated"),
        (
            "CREATE TABLE t_1 (id BIGINT PRIMARY KEY)",
            logging.WARNING,
            "not applied downstream (of a sharded table only ALTER TABLE",
        ),
        ("TRUNCATE TABLE t_1", logging.WARNING, "not applied downstream (of a sharded"),
    ],
)
def test_a_sharded_tables_ddl_is_logged_for_what_happens_to_it(
    caplog: pytest.LogCaptureFixture, statement: str, level: int, says: str
) -> None:
    caplog.set_level(logging.INFO, logger="rowbus.spark_apply.ddl")
    assert _sink_ddl().plan(ddl(10, statement, table("db", "t_1"))) is None
    (record,) = [r for r in caplog.records if r.name == "rowbus.spark_apply.ddl"]
    assert record.levelno == level
    assert says in record.getMessage()
