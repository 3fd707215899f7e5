"""Where the current binlog position is read: MySQL 8.4 removed SHOW MASTER STATUS (a syntax
error there) for SHOW BINARY LOG STATUS; every other error still surfaces."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from rowbus.clients.mysql import binlog_position


class FakeCursor:
    """Answers like a server that knows only `known` (others: `error`)."""

    def __init__(self, known: str, row: Any, error: Exception | None = None) -> None:
        self.known, self.row, self.error = known, row, error
        self.ran: list[str] = []

    def execute(self, sql: str) -> None:
        self.ran.append(sql)
        if sql != self.known:
            raise self.error or pymysql.err.ProgrammingError(
                1064, f"You have an error in your SQL syntax near '{sql}'"
            )

    def fetchone(self) -> Any:
        return self.row


def test_mysql_84_answers_show_binary_log_status() -> None:
    cur = FakeCursor("SHOW BINARY LOG STATUS", ("binlog.000042", 1234, "", "", ""))
    assert binlog_position(cur) == ("binlog.000042", 1234)
    assert cur.ran == ["SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"]


def test_mariadb_and_older_mysql_answer_show_master_status() -> None:
    cur = FakeCursor("SHOW MASTER STATUS", ("mariadb-bin.000003", 385, "", ""))
    assert binlog_position(cur) == ("mariadb-bin.000003", 385)
    assert cur.ran == ["SHOW MASTER STATUS"]


def test_binary_logging_off_is_no_position() -> None:
    assert binlog_position(FakeCursor("SHOW MASTER STATUS", None)) is None


def test_a_missing_grant_is_not_mistaken_for_an_old_server() -> None:
    denied = pymysql.err.OperationalError(1227, "Access denied; you need REPLICATION CLIENT")
    cur = FakeCursor("nothing", None, denied)
    with pytest.raises(pymysql.err.OperationalError):
        binlog_position(cur)
    assert cur.ran == ["SHOW MASTER STATUS"]
