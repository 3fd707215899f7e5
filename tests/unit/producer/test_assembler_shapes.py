"""Transaction shapes as MariaDB 10.11 writes them in ROW format (event sequences measured on a
real server, see PROTOCOL.md "Transaction shapes")."""

from __future__ import annotations

from rowbus.producer.assembler import (
    DdlItem,
    GtidMark,
    Query,
    Rows,
    Transaction,
    TransactionAssembler,
    XaPrepare,
    Xid,
)
from rowbus.producer.txn_control import TxnControl, classify
from rowbus.protocol.events import ColumnSchema, Op, TableSchema

T = TableSchema("db", "t", (ColumnSchema("id", "int"),), ("id",))


def rows(end: int, *ids: int) -> Rows:
    return Rows(Op.INSERT, T, end, lambda: [(None, (i,)) for i in ids])


def ids(txn: Transaction) -> list[int]:
    return [c.after[0] for c in txn.changes if not isinstance(c, DdlItem)]  # type: ignore[index]


def begin(a: TransactionAssembler, gtid: str, end: int) -> None:
    assert a.feed(GtidMark(gtid, end, 42, standalone=False, opens=True)) is None


def test_classify_control_statements() -> None:
    assert classify("SAVEPOINT `sp1`") is not None
    sp = classify("SAVEPOINT `Sp1`")
    assert sp is not None and (sp.kind, sp.name) == (TxnControl.SAVEPOINT, "sp1")
    back = classify("ROLLBACK TO `sp1`")
    assert back is not None and (back.kind, back.name) == (TxnControl.ROLLBACK_TO, "sp1")
    back = classify("rollback work to savepoint sp1")
    assert back is not None and (back.kind, back.name) == (TxnControl.ROLLBACK_TO, "sp1")
    rel = classify("RELEASE SAVEPOINT sp1")
    assert rel is not None and rel.kind is TxnControl.RELEASE
    assert classify("ROLLBACK") == classify(" rollback ")
    xa = classify("XA COMMIT X'7831',X'',1")
    assert xa is not None and (xa.kind, xa.name) == (TxnControl.XA_COMMIT, "X'7831',X'',1")
    one = classify("XA COMMIT 'x' ONE PHASE")
    assert one is not None and one.kind is TxnControl.XA_COMMIT_ONE_PHASE
    assert classify("CREATE TABLE savepoint_log (id INT)") is None


def test_savepoint_is_not_a_change_and_does_not_end_the_group() -> None:
    a = TransactionAssembler("bin.1", 4)
    begin(a, "0-1-4", 415)
    a.feed(rows(561, 1))
    assert a.feed(Query("SAVEPOINT `sp1`", "db", 640, 79, 1)) is None
    a.feed(rows(786, 2))
    txn = a.feed(Xid(817, 1))
    assert txn is not None
    assert ids(txn) == [1, 2]
    assert all(not isinstance(c, DdlItem) for c in txn.changes)


def test_rollback_to_savepoint_drops_the_changes_after_it_and_keeps_the_group_open() -> None:
    # MariaDB keeps the rows events before ROLLBACK TO when a non-transactional table was
    # touched after the savepoint; a replica undoes them by running the statement.
    a = TransactionAssembler("bin.4", 4)
    begin(a, "0-1-25", 1059)
    a.feed(rows(1207, 31))
    a.feed(Query("SAVEPOINT `s`", "db", 1284, 77, 1))
    a.feed(rows(1409, 1, 2))
    assert a.feed(Query("ROLLBACK TO `s`", "db", 1488, 79, 1)) is None
    assert a.in_transaction
    a.feed(rows(1500, 5))
    txn = a.feed(Xid(1519, 1))
    assert txn is not None
    assert ids(txn) == [31, 5]


def test_nested_savepoints_and_release() -> None:
    a = TransactionAssembler("bin.1", 4)
    begin(a, "0-1-9", 100)
    a.feed(rows(110, 1))
    a.feed(Query("SAVEPOINT a", "db", 120, 10, 1))
    a.feed(rows(130, 2))
    a.feed(Query("SAVEPOINT b", "db", 140, 10, 1))
    a.feed(rows(150, 3))
    a.feed(Query("RELEASE SAVEPOINT b", "db", 160, 10, 1))
    a.feed(rows(170, 4))
    a.feed(Query("ROLLBACK TO a", "db", 180, 10, 1))
    a.feed(rows(190, 5))
    txn = a.feed(Xid(200, 1))
    assert txn is not None
    assert ids(txn) == [1, 5]


def test_create_table_select_is_a_ddl_then_its_rows() -> None:
    a = TransactionAssembler("bin.3", 596)
    begin(a, "0-1-11", 675)
    ddl = a.feed(Query("CREATE TABLE `c` (`id` int NOT NULL)", "db", 825, 150, 1))
    assert ddl is None  # the DDL goes out when the first row comes (or the group ends)
    first = a.feed(rows(1008, 1, 2))
    assert first is not None
    assert [type(c) for c in first.changes] == [DdlItem]
    assert first.end.offset == 596  # a restart reads the whole group again
    txn = a.feed(Xid(1039, 1))
    assert txn is not None
    assert ids(txn) == [1, 2]
    assert txn.id != first.id
    assert txn.end.offset == 1039


def xa_group(a: TransactionAssembler, gtid: str, at: int, xid: str, *row_ids: int) -> Transaction:
    assert a.feed(GtidMark(gtid, at, 46, standalone=False, opens=True)) is None
    a.feed(rows(at + 100, *row_ids))
    assert a.feed(Query(f"XA END {xid}", "db", at + 180, 84, 1)) is None
    prepared = a.feed(XaPrepare(at + 220, 1))
    assert prepared is not None
    assert prepared.changes == []
    return prepared


def xa_finish(a: TransactionAssembler, gtid: str, at: int, stmt: str) -> Transaction:
    assert a.feed(GtidMark(gtid, at, 44, standalone=True, opens=True)) is None
    txn = a.feed(Query(stmt, "db", at + 90, 87, 2))
    assert txn is not None
    return txn


def test_xa_prepared_then_committed_comes_out_at_its_commit_with_the_commit_position() -> None:
    a = TransactionAssembler("bin.3", 1270)
    prepared = xa_group(a, "0-1-13", 1270, "X'7831',X'',1", 20)
    assert prepared.end.offset == 1270  # held: resume before its group
    assert a.prepared == 1
    begin(a, "0-1-14", 1540)
    a.feed(rows(1600, 24))
    other = a.feed(Xid(1650, 1))
    assert other is not None
    assert ids(other) == [24]
    assert other.end.offset == 1270  # still held
    commit = xa_finish(a, "0-1-15", 1700, "XA COMMIT X'7831',X'',1")
    assert ids(commit) == [20]
    assert commit.gtid == "0-1-15"
    assert {c.position.offset for c in commit.changes} == {1790}
    assert commit.end.offset == 1790
    assert a.prepared == 0


def test_xa_rollback_after_prepare_drops_the_rows() -> None:
    a = TransactionAssembler("bin.3", 1938)
    xa_group(a, "0-1-16", 1938, "X'7833',X'',1", 22)
    txn = xa_finish(a, "0-1-17", 2254, "XA ROLLBACK X'7833',X'',1")
    assert txn.changes == []
    assert txn.end.offset == 2344
    assert a.prepared == 0


def test_xa_commit_one_phase_of_mysql_closes_its_group() -> None:
    a = TransactionAssembler("bin.1", 4)
    a.feed(GtidMark("u:1", 100, 79, standalone=False, opens=False))
    a.feed(Query("XA START 'x'", "db", 150, 50, 1))
    a.feed(rows(200, 7))
    a.feed(Query("XA END 'x'", "db", 250, 50, 1))
    txn = a.feed(Query("XA COMMIT 'x' ONE PHASE", "db", 300, 50, 1))
    assert txn is not None
    assert ids(txn) == [7]


def test_xa_commit_of_an_unknown_transaction_moves_on() -> None:
    a = TransactionAssembler("bin.1", 4)
    txn = xa_finish(a, "0-1-20", 100, "XA COMMIT 'never-seen'")
    assert txn.changes == []


def test_rows_then_a_ddl_in_one_group_come_out_as_two_transactions_in_order() -> None:
    a = TransactionAssembler("bin.1", 50)
    begin(a, "0-1-30", 100)
    a.feed(rows(150, 1))
    first = a.feed(Query("CREATE TABLE x (id INT)", "db", 200, 50, 1))
    assert first is not None
    assert ids(first) == [1]
    assert first.end.offset == 50
    ddl = a.feed(Xid(230, 1))
    assert ddl is not None
    assert [type(c) for c in ddl.changes] == [DdlItem]
    assert ddl.end.offset == 230
    assert ddl.id == "0-1-30#1"


def test_an_unwanted_ddl_inside_a_group_does_not_split_it() -> None:
    a = TransactionAssembler("bin.1", 50, ddl_wanted=lambda schema, target: False)
    begin(a, "0-1-31", 100)
    a.feed(rows(150, 1))
    assert a.feed(Query("CREATE TABLE x (id INT)", "db", 200, 50, 1)) is None
    a.feed(rows(250, 2))
    txn = a.feed(Xid(280, 1))
    assert txn is not None
    assert ids(txn) == [1, 2]
