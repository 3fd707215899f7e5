"""A session may log its changes as statements (`SET SESSION binlog_format = STATEMENT`, or
MIXED, which logs a deterministic statement as such): the binlog then holds no row events for
them, and a reader that passed them on would lose those changes without a word. The reader
stops at the first such statement of an included table, in one line naming the binlog
position and the tables; statements on tables it does not read pass."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from rowbus.clients import mysql
from rowbus.config import Settings
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.protocol.events import DdlChange, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.definitions import is_definition
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

CASES = {
    "statement-update": ("STATEMENT", "UPDATE t SET v = v + 1 WHERE id = 1"),
    "mixed-insert": ("MIXED", "INSERT INTO t VALUES (2, 2)"),
    "statement-multi-delete": ("STATEMENT", "DELETE t FROM t JOIN t AS u ON t.id = u.id"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_change_logged_as_a_statement_stops_the_reader_in_one_line(
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
    make_database: Callable[..., str],
    case: str,
) -> None:
    setup = make_reader_setup(1)
    server = setup.server
    other = make_database(server)  # not read by this reader
    db = setup.database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"CREATE TABLE `{other}`.x (id INT PRIMARY KEY)")
    image, statement = CASES[case]

    def alive() -> bool:
        return any(
            t.name == f"reader-{setup.source}" and t.is_alive() for t in threading.enumerate()
        )

    rows: list[object] = []

    def run() -> None:
        with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
            wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
            with connect(server, db) as conn, conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1, 1)")  # rows: published
                data = TopicReader(services, setup.data_topic)
                rows.extend(
                    data.until(
                        lambda rs: any(isinstance(r, RowChange) for r in rs),
                        timeout=60,
                        what="the row insert",
                    )
                )
                data.close()
                cur.execute(f"SET SESSION binlog_format = '{image}'")
                cur.execute(f"INSERT INTO `{other}`.x VALUES (1)")  # not read: passes
                cur.execute(statement)
            wait_for(lambda: not alive(), timeout=90, what="the reader to stop")

    with pytest.raises(ServerMisconfiguredError) as refused:
        run()
    text = str(refused.value)
    assert "\n" not in text
    assert "a change logged as a statement, not as rows" in text, text
    assert f"{db}.t" in text and other not in text, text
    assert text.startswith("binlog.") and "(gtid " in text, text
    assert [(r.op.value, r.after) for r in rows if isinstance(r, RowChange)] == [("insert", (1, 1))]


def test_load_data_logged_as_a_statement_stops_the_reader_and_passes_on_an_excluded_table(
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
    make_database: Callable[..., str],
    tmp_path: Path,
) -> None:
    """LOAD DATA logged as a statement is no Query event: the server writes the file's bytes
    (Begin_load_query, Append_block) and then the statement (Execute_load_query)."""
    setup = make_reader_setup(1)
    server = setup.server
    other = make_database(server)  # not read by this reader
    db = setup.database
    rows_file = tmp_path / "rows.csv"
    rows_file.write_text("".join(f"{i},{i}\n" for i in range(10, 20)))
    keys_file = tmp_path / "keys.csv"
    keys_file.write_text("".join(f"{i}\n" for i in range(10, 20)))
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"CREATE TABLE `{other}`.x (id INT PRIMARY KEY)")

    def alive() -> bool:
        return any(
            t.name == f"reader-{setup.source}" and t.is_alive() for t in threading.enumerate()
        )

    records: list[object] = []

    def run() -> None:
        with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
            wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
            # LOCAL: the test server's secure_file_priv forbids server-side files
            with mysql.connect(server, database=db, local_infile=True) as conn:
                with conn.cursor() as cur:
                    cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                    cur.execute(  # a table this reader does not read: passes
                        f"LOAD DATA LOCAL INFILE '{keys_file}' INTO TABLE `{other}`.x"
                    )
                    cur.execute("SET SESSION binlog_format = 'ROW'")
                    cur.execute("INSERT INTO t VALUES (1, 1)")  # rows: published
                data = TopicReader(services, setup.data_topic)
                records.extend(
                    data.until(
                        lambda rs: any(isinstance(r, RowChange) for r in rs),
                        timeout=60,
                        what="the row insert after the excluded LOAD DATA",
                    )
                )
                data.close()
                with conn.cursor() as cur:
                    cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                    cur.execute(
                        f"LOAD DATA LOCAL INFILE '{rows_file}' INTO TABLE t "
                        "FIELDS TERMINATED BY ','"
                    )
            wait_for(lambda: not alive(), timeout=90, what="the reader to stop")

    with pytest.raises(ServerMisconfiguredError) as refused:
        run()
    text = str(refused.value)
    assert "\n" not in text
    assert "a change logged as a statement, not as rows" in text, text
    assert "LOAD DATA" in text and f"{db}.t" in text and other not in text, text
    assert text.startswith("binlog.") and "(gtid " in text, text
    assert "binlog_format=ROW" in text, text
    # the excluded LOAD DATA was neither refused nor published (not even as a statement)
    assert [(r.op.value, r.after) for r in records if isinstance(r, RowChange)] == [
        ("insert", (1, 1))
    ]
    assert not [r for r in records if isinstance(r, DdlChange) and not is_definition(r)], records
