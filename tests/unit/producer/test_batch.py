"""The batcher: schema records ahead of rows, key-changing updates split, flush decisions."""

from __future__ import annotations

import datetime as dt

from rowbus.producer.assembler import DdlItem, RowItem, Transaction
from rowbus.producer.batch import Batcher, FlushPolicy
from rowbus.producer.records import NativeRecords, Topics
from rowbus.producer.tables import TableFilter, converter_for
from rowbus.protocol.codec import Encoding, decode
from rowbus.protocol.ddl import parse_ddl
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    DdlChange,
    Op,
    Resolved,
    RowChange,
    SchemaRecord,
    TableSchema,
)
from rowbus.protocol.hlc import HybridClock, physical_ms
from rowbus.protocol.partition import Partitioner

T = TableSchema(
    "db",
    "t",
    (ColumnSchema("id", "int"), ColumnSchema("v", "varchar"), ColumnSchema("ts", "timestamp")),
    ("id",),
)
POS = BinlogPosition("bin.1", 100, "0-1-1")


def batcher(policy: FlushPolicy | None = None, native: bool = True) -> Batcher:
    records = NativeRecords(
        Topics("src", "rowbus.{source}", lambda topic: 4, Partitioner), "schemas", Encoding.PROTOBUF
    )
    records.native = records.native and native
    return Batcher("src", HybridClock(), records, lambda item: T, policy=policy)


def txn(*changes: RowItem | DdlItem, commit: int = 1_700_000_000) -> Transaction:
    return Transaction(
        "0-1-1", "0-1-1", BinlogPosition("bin.1", 200, "0-1-1"), commit, list(changes)
    )


def decoded(b: Batcher) -> list[tuple[str, int | None, object]]:
    return [(t, p, decode(v, h)) for t, p, _, v, h in b.take().records]


def test_schema_record_precedes_first_row_and_only_once() -> None:
    b = batcher()
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a", None), POS)), now=0.0)
    b.add(txn(RowItem(Op.INSERT, T, None, (2, "b", None), POS)), now=0.0)
    records = decoded(b)
    assert isinstance(records[0][2], SchemaRecord)
    assert records[0][0] == "schemas"
    assert [type(r) for _, _, r in records] == [SchemaRecord, RowChange, RowChange]
    row = records[1][2]
    assert isinstance(row, RowChange)
    assert row.txn.count == 1
    assert physical_ms(row.ts) == 1_700_000_000_000


def test_update_that_moves_the_key_becomes_delete_then_insert() -> None:
    b = batcher()
    b.add(txn(RowItem(Op.UPDATE, T, (1, "a", None), (2, "a", None), POS)), now=0.0)
    assert b.batch.stats.rows == 2
    rows = [r for _, _, r in decoded(b) if isinstance(r, RowChange)]
    assert [r.op for r in rows] == [Op.DELETE, Op.INSERT]
    assert [(r.txn.index, r.txn.count) for r in rows] == [(0, 2), (1, 2)]


def test_ddl_goes_to_every_partition_and_resolved_follows() -> None:
    b = batcher()
    b.records.topics.for_table("db", "t")
    ddl = DdlItem("ALTER TABLE t ADD x INT", "db", parse_ddl("ALTER TABLE t ADD x INT", "db"), POS)
    b.add(txn(ddl), now=0.0)
    b.add_resolved()
    records = decoded(b)
    ddls = [(p, r) for _, p, r in records if isinstance(r, DdlChange)]
    assert sorted(p for p, _ in ddls) == [0, 1, 2, 3]
    assert ddls[0][1].table_schema == T
    resolved = [r for _, _, r in records if isinstance(r, Resolved)]
    assert len(resolved) == 4
    assert resolved[0].ts == ddls[0][1].ts


def test_flush_policy() -> None:
    b = batcher(FlushPolicy(rows=2, bytes=10**9, interval_s=0.5, idle_interval_s=1.0))
    assert not b.due(0.0)
    b.add(txn(), now=0.0)  # position only
    assert not b.due(0.9)
    assert b.due(1.0)
    b.take()
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a", None), POS)), now=5.0)
    assert not b.due(5.1)
    assert b.due(5.5)
    b.add(txn(RowItem(Op.INSERT, T, None, (2, "a", None), POS)), now=5.2)
    assert b.due(5.2)
    assert b.take().end is not None
    assert b.batch.records == []


def test_every_transaction_ticks_the_clock() -> None:
    b = batcher()
    b.add(txn(commit=100), now=0.0)
    b.add(txn(commit=100), now=0.0)
    assert b.clock.last == (100_000 << 16) + 1


def test_converter_fixes_library_types() -> None:
    table = TableSchema(
        "d",
        "t",
        (
            ColumnSchema("id", "int"),
            ColumnSchema("ts", "timestamp"),
            ColumnSchema("b", "bit"),
            ColumnSchema("s", "set"),
        ),
        ("id",),
    )
    convert = converter_for(table)
    aware = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    image = convert({"id": 1, "ts": aware, "b": 5, "s": frozenset({"x"})})
    assert image == (1, aware, 5, frozenset({"x"}))
    assert convert({"id": 1, "ts": None, "b": None, "s": None}) == (1, None, None, None)


def test_table_filter() -> None:
    f = TableFilter(["shop*"], [], [], ["shop.secret*"], ["mysql"])
    assert f.wanted("shop", "orders")
    assert not f.wanted("shop", "secret_keys")
    assert not f.wanted("other", "orders")
    assert not f.wanted("mysql", "user")
    assert f.schema_wanted("shop_eu")


def test_fast_key_path_agrees_with_the_partitioner() -> None:
    b = batcher()
    for i in range(50):
        b.add(txn(RowItem(Op.INSERT, T, None, (i, "a", None), POS)), now=0.0)
    partitioner = Partitioner(4)
    for _, partition, key, value, headers in b.batch.records:
        row = decode(value, headers)
        if isinstance(row, RowChange):
            assert (key, partition) == partitioner.partition_row(row, T)


def test_update_keeping_its_key_stays_an_update() -> None:
    b = batcher()
    b.add(txn(RowItem(Op.UPDATE, T, (1, "a", None), (1, "b", None), POS)), now=0.0)
    rows = [r for _, _, r in decoded(b) if isinstance(r, RowChange)]
    assert [r.op for r in rows] == [Op.UPDATE]


def test_ddl_schema_comes_from_the_next_table_map_of_its_table() -> None:
    later = TableSchema("db", "t", (*T.columns, ColumnSchema("x", "int")), ("id",))
    b = batcher()  # its live lookup answers T: it must not be used here
    stmt = "ALTER TABLE t ADD x INT"
    b.add(txn(DdlItem(stmt, "db", parse_ddl(stmt, "db"), POS)), now=0.0)
    b.add(txn(RowItem(Op.INSERT, later, None, (1, "a", None, 5), POS)), now=0.0)
    ddls = [r for _, _, r in decoded(b) if isinstance(r, DdlChange)]
    assert len(ddls) == 4
    assert {d.table_schema for d in ddls} == {later}


def test_a_pending_ddl_holds_the_flush_until_its_table_shows_its_schema() -> None:
    from rowbus.producer.batch import DDL_SCHEMA_WAIT_S

    later = TableSchema("db", "t", (*T.columns, ColumnSchema("x", "int")), ("id",))
    b = batcher(FlushPolicy(rows=1000, bytes=10**9, interval_s=0.2, idle_interval_s=1.0))
    stmt = "ALTER TABLE t ADD x INT"
    b.add(txn(DdlItem(stmt, "db", parse_ddl(stmt, "db"), POS)), now=0.0)
    assert not b.due(1.0)  # past the interval, but the DDL's schema is not known yet
    assert b.due(DDL_SCHEMA_WAIT_S)  # bounded: then the live server answers
    b.add(txn(RowItem(Op.INSERT, later, None, (1, "a", None, 5), POS)), now=1.0)
    assert b.due(1.0)  # resolved by the row's table map
    ddls = [r for _, _, r in decoded(b) if isinstance(r, DdlChange)]
    assert {d.table_schema for d in ddls} == {later}


def test_a_ddl_followed_by_another_ddl_of_its_table_carries_no_schema() -> None:
    final = TableSchema("db", "t", (T.columns[0], ColumnSchema("x", "int")), ("id",))
    b = batcher()  # its live lookup answers T, which is neither DDL's schema: never used here
    first, second = "ALTER TABLE t ADD x INT", "ALTER TABLE t DROP v, DROP ts"
    b.add(txn(DdlItem(first, "db", parse_ddl(first, "db"), POS)), now=0.0)
    b.add(txn(DdlItem(second, "db", parse_ddl(second, "db"), POS)), now=0.0)
    b.add(txn(RowItem(Op.INSERT, final, None, (1, 5), POS)), now=0.0)
    ddls = [r for _, _, r in decoded(b) if isinstance(r, DdlChange)]
    assert {d.table_schema for d in ddls if d.statement == first} == {None}
    assert {d.table_schema for d in ddls if d.statement == second} == {final}


def test_native_and_pure_batches_hold_the_same_records() -> None:
    # The batcher's native path (fastrows.change_value, int_key, partition) against its pure one:
    # every record identical, byte for byte, keys and partitions included.
    k = TableSchema("db", "k", (ColumnSchema("a", "varchar"), ColumnSchema("b", "int")), ("a", "b"))
    changes = [
        RowItem(Op.INSERT, T, None, (1, "a", None), POS),
        RowItem(Op.INSERT, T, None, (2**64 - 1, "é", dt.datetime(2024, 1, 1, tzinfo=dt.UTC)), POS),
        RowItem(Op.UPDATE, T, (1, "a", None), (1, "b", None), POS),
        RowItem(Op.UPDATE, T, (1, "a", None), (3, "a", None), POS),
        RowItem(Op.DELETE, T, (-(2**63), "x", None), None, POS),
        RowItem(Op.INSERT, k, None, ("k€y", 5), POS),
        RowItem(Op.DELETE, k, ("", 0), None, POS),
    ]
    out = []
    for native in (True, False):
        b = batcher(native=native)
        b.add(txn(*changes), now=0.0)
        out.append(b.take().records)
    assert out[0] == out[1]
    assert len(out[0]) == len(changes) + 3  # schema records of T and k, the key-moving update


def test_native_and_pure_snapshot_chunks_hold_the_same_records() -> None:
    # add_snapshot's lean loop (values bound per chunk) against the pure path, byte for byte;
    # a string key and a value the native split does not cover take the general way.
    k = TableSchema("db", "k", (ColumnSchema("a", "varchar"), ColumnSchema("b", "set")), ("a",))
    rows = [(i, f"v{i}", None) for i in range(5)] + [(2**64 - 1, "é", None)]
    out = []
    for native in (True, False):
        b = batcher(native=native)
        b.add_snapshot(T, rows, "snapshot:0:db.t:0", 7, POS, now=0.0)
        b.add_snapshot(k, [("x", frozenset({"a", "b"})), ("y", frozenset())], "s:1", 13, POS, 0.0)
        out.append(b.take().records)
    assert out[0] == out[1]
    assert len(out[0]) == len(rows) + 2 + 2
    reads = [decode(v, h) for _, _, _, v, h in out[0]]
    indexes = [r.txn.index for r in reads if isinstance(r, RowChange)]
    assert indexes == [7, 8, 9, 10, 11, 12, 13, 14]


def test_a_definition_goes_just_before_its_transaction_with_its_ts() -> None:
    """PROTOCOL.md §9.6: the CREATEs of a table met first go before the transaction's first
    event (its offset - 1: no streamed event ends there), with the transaction's ts, so a
    merge releases them first and never takes them for replays."""
    b = batcher()
    creates = ["CREATE DATABASE IF NOT EXISTS `db`", "CREATE TABLE IF NOT EXISTS `t` (id INT)"]
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a", None), POS)), now=0.0, defining=[(T, creates)])
    events = [r for _, _, r in decoded(b) if isinstance(r, (DdlChange, RowChange))]
    ddls = [e for e in events if isinstance(e, DdlChange)]
    row = next(e for e in events if isinstance(e, RowChange))
    assert sorted({(d.statement, d.txn.index) for d in ddls if d.txn}) == [
        (creates[0], 0),
        (creates[1], 1),
    ]
    assert {(d.position.offset, d.ts, d.txn.id if d.txn else None) for d in ddls} == {
        (POS.offset - 1, row.ts, "define:0-1-1")
    }
    assert events.index(row) > max(i for i, e in enumerate(events) if isinstance(e, DdlChange))
    assert {d.table_schema for d in ddls if d.table} == {T}
