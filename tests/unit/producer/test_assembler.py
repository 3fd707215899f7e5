"""The transaction assembler restores whole transactions and their resume positions."""

from __future__ import annotations

import pytest

from rowbus.producer.assembler import (
    GtidMark,
    Query,
    Rotate,
    Rows,
    ServerHeartbeat,
    Skipped,
    TransactionAssembler,
    Xid,
)
from rowbus.producer.exceptions import CorruptBinlogError
from rowbus.protocol.events import ColumnSchema, Op, TableSchema

T = TableSchema("db", "t", (ColumnSchema("id", "int"),), ("id",))


def rows(end: int, *ids: int) -> Rows:
    return Rows(Op.INSERT, T, end, lambda: [(None, (i,)) for i in ids])


def test_mariadb_transaction_ends_at_xid_with_its_gtid() -> None:
    a = TransactionAssembler("bin.1", 4)
    assert a.feed(GtidMark("0-1-5", 100, 19, standalone=False, opens=True)) is None
    assert a.in_transaction
    assert a.feed(Skipped(150)) is None
    assert a.feed(rows(200, 1, 2)) is None
    txn = a.feed(Xid(231, 1700000000))
    assert txn is not None
    assert (txn.id, txn.gtid, txn.commit_time) == ("0-1-5", "0-1-5", 1700000000)
    assert (txn.end.file, txn.end.offset, txn.end.gtid) == ("bin.1", 231, "0-1-5")
    assert [c.after for c in txn.changes] == [(1,), (2,)]  # type: ignore[union-attr]
    assert {c.position.offset for c in txn.changes} == {200}
    assert not a.in_transaction
    assert a.event_position.offset == 231


def test_standalone_ddl_is_a_transaction_of_its_own() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("0-1-6", 300, 19, standalone=True, opens=True))
    assert a.in_transaction
    txn = a.feed(Query("ALTER TABLE t ADD c INT", "db", 400, 100, 1700000001))
    assert txn is not None
    assert txn.gtid == "0-1-6"
    assert txn.end.offset == 400
    (ddl,) = txn.changes
    table = ddl.parsed.table  # type: ignore[union-attr]
    assert table is not None
    assert (table.schema, table.table) == ("db", "t")


def test_non_transactional_group_ends_at_commit_query() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("0-1-7", 500, 19, standalone=False, opens=True))
    a.feed(rows(600, 3))
    txn = a.feed(Query("COMMIT", "db", 650, 50, 1700000002))
    assert txn is not None
    assert txn.end.offset == 650
    assert len(txn.changes) == 1


def test_mysql_begin_opens_and_ddl_outside_begin_is_standalone() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("uuid:1", 100, 79, standalone=False, opens=False))
    assert a.feed(Query("BEGIN", "db", 150, 50, 1)) is None
    a.feed(rows(200, 1))
    txn = a.feed(Xid(231, 1))
    assert txn is not None
    assert txn.gtid == "uuid:1"
    a.feed(GtidMark("uuid:2", 300, 79, standalone=False, opens=False))
    ddl = a.feed(Query("CREATE TABLE x (id INT)", "db", 400, 100, 2))
    assert ddl is not None
    assert ddl.gtid == "uuid:2"


def test_ddl_filter_drops_unwanted_statements_but_keeps_the_position() -> None:
    a = TransactionAssembler("bin.1", 4, ddl_wanted=lambda schema, target: False)
    a.feed(GtidMark("0-1-8", 100, 19, standalone=True, opens=True))
    txn = a.feed(Query("DROP TABLE t", "other", 200, 100, 1))
    assert txn is not None
    assert txn.changes == []
    assert txn.end.offset == 200


def test_rotate_moves_the_file_and_heartbeat_changes_nothing() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(Rotate("bin.2", 4))
    a.feed(ServerHeartbeat("bin.2", 4))
    assert a.event_position.file == "bin.2"
    a.feed(GtidMark("0-1-9", 100, 19, standalone=False, opens=True))
    txn = a.feed(Xid(131, 1))
    assert txn is not None
    assert txn.end.file == "bin.2"


def test_gtid_while_open_drops_the_unfinished_group() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("0-1-1", 100, 19, standalone=False, opens=True))
    a.feed(rows(200, 1))
    a.feed(GtidMark("0-1-2", 300, 19, standalone=False, opens=True))
    a.feed(rows(400, 2))
    txn = a.feed(Xid(431, 1))
    assert txn is not None
    assert txn.gtid == "0-1-2"
    assert [c.after for c in txn.changes] == [(2,)]  # type: ignore[union-attr]


def test_a_row_image_that_does_not_decode_stops_in_one_line_at_its_event() -> None:
    def bad() -> list[tuple[None, tuple[int]]]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("0-1-5", 100, 19, standalone=False, opens=True))
    with pytest.raises(CorruptBinlogError) as raised:
        a.feed(Rows(Op.INSERT, T, 200, bad))
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith(
        "bin.1:200 gtid=0-1-5: db.t: a row image cannot be read (UnicodeDecodeError"
    )
    assert "SHOW CREATE TABLE" in line
