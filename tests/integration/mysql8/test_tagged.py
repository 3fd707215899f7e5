"""MySQL 8.3+'s tagged GTIDs (``uuid:tag:N``) through the real reader and the MySQL 8.4
primary (`tests.mysql8`): a tagged start position, tagged GTIDs on the records and in the
checkpoint, and a resume from that checkpoint that publishes each row once."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from rowbus.config import Settings
from rowbus.protocol.events import ReaderCheckpoint, Record, RowChange
from rowbus.protocol.positions import parse_gtid_set
from rowbus.waiting import wait_for
from tests.integration.mysql8.test_reader import ReaderThread, setup_for
from tests.integration.producer.helpers import ReaderSetup, TopicReader
from tests.mysql8.binlog import SERVER_UUID, Binlog, Change, Table, Transaction
from tests.mysql8.primary import Primary
from tests.mysql8.rows import column


def _history(database: str) -> tuple[Binlog, Table]:
    log = Binlog()
    table = Table(database, "t", [column("id", "INT", primary=True), column("v", "VARCHAR(8)")], 9)
    log.add(
        [
            Transaction(ddl=f"CREATE DATABASE `{database}`"),
            Transaction(ddl="CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(8))", schema=database),
        ]
    )
    return log, table


def _rows(log: Binlog, table: Table, ids: list[int], tags: list[str]) -> None:
    log.add(
        Transaction([Change(table, None, (i, f"r{i}"))], tag=t)
        for i, t in zip(ids, tags, strict=True)
    )


def _published(setup: ReaderSetup, count: int) -> list[RowChange]:
    """The row changes on the data topic in binlog order (its partitions interleave)."""
    topic = TopicReader(setup.services, setup.data_topic)
    try:
        records: list[Record] = topic.until(
            lambda rs: sum(isinstance(r, RowChange) for r in rs) >= count,
            timeout=60,
            what=f"{count} row changes",
        )
    finally:
        topic.close()
    rows = [r for r in records if isinstance(r, RowChange)]
    return sorted(rows, key=lambda r: (r.position.file, r.position.offset))


def _run(setup: ReaderSetup, rows: int, **overrides: object) -> None:
    """The reader until it has published `rows` row changes, then stopped."""
    with ReaderThread(setup, snapshot="never", **overrides) as r:
        wait_for(
            lambda: r.reader.metrics.rows >= rows or r.error is not None,
            timeout=60,
            what=f"{rows} row changes published",
        )
    assert r.error is None, r.error


def test_a_tagged_start_position_and_a_resume_from_a_tagged_checkpoint(
    services: Settings, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    database = f"m8t_{uuid.uuid4().hex[:6]}"
    log, table = _history(database)
    # ids 1..4: untagged, blue, untagged, blue
    _rows(log, table, [1, 2, 3, 4], ["", "blue", "", "blue"])
    with Primary(log) as server:
        setup = setup_for(services, server, database, make_topic, unique)
        # After the transaction uuid:blue:1 (row 2): rows 3 and 4.
        _run(setup, 2, start=f"gtid:{SERVER_UUID}:blue:1")
        rows = _published(setup, 2)
        assert [r.after[0] for r in rows if r.after] == [3, 4]
        # Untagged: the two DDLs, rows 1 and 3; tagged blue: rows 2 and 4.
        assert [r.position.gtid for r in rows] == [f"{SERVER_UUID}:4", f"{SERVER_UUID}:blue:2"]

        checkpoints = TopicReader(services, setup.checkpoints_topic)
        try:
            last = checkpoints.until(
                lambda rs: any(
                    isinstance(r, ReaderCheckpoint) and r.position.offset == log.current[1]
                    for r in rs
                ),
                timeout=30,
                what="the checkpoint at the binlog's end",
            )
        finally:
            checkpoints.close()
        at_end = [r for r in last if isinstance(r, ReaderCheckpoint)][-1]
        assert parse_gtid_set(at_end.gtid_set).get(f"{SERVER_UUID}:blue") == 2, at_end.gtid_set

        # More history in a new file, tagged green; the reader resumes from its checkpoint.
        log.rotate()
        _rows(log, table, [5, 6], ["green", ""])
        _run(setup, 2)
        rows = _published(setup, 4)
        assert [r.after[0] for r in rows if r.after] == [3, 4, 5, 6]  # once each, in order
        assert rows[2].position.gtid == f"{SERVER_UUID}:green:1"
        assert rows[2].position.file == "binlog.000002"


def test_a_reader_started_at_latest_reads_what_the_primary_writes_after(
    services: Settings, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    """start: latest asks SHOW MASTER STATUS, which 8.4 removed, then SHOW BINARY LOG STATUS;
    the dump then waits (heartbeats) and serves what is written while the reader runs."""
    database = f"m8l_{uuid.uuid4().hex[:6]}"
    log, table = _history(database)
    _rows(log, table, [1], [""])
    with Primary(log) as server:
        setup = setup_for(services, server, database, make_topic, unique)
        with ReaderThread(setup, start="latest", snapshot="never") as r:
            wait_for(
                lambda: any(f == log.current for f in server.seen.dumps) or r.error is not None,
                timeout=30,
                what="the reader's dump from the binlog's end",
            )
            _rows(log, table, [2, 3], ["", "late"])
            wait_for(
                lambda: r.reader.metrics.rows >= 2 or r.error is not None,
                timeout=30,
                what="the rows written after the start",
            )
        assert r.error is None, r.error
        assert "SHOW BINARY LOG STATUS" in server.seen.queries
        assert not server.seen.unanswered, server.seen.unanswered
    rows = _published(setup, 2)
    assert [r.after[0] for r in rows if r.after] == [2, 3]
