"""murmur2 and the partitioner agree with Kafka's Java client."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    DdlChange,
    Heartbeat,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.partition import (
    Dispatch,
    DispatchRule,
    Partitioner,
    encode_key,
    java_partition,
    murmur2,
    to_positive,
)

# Kafka's clients/src/test/.../utils/UtilsTest.testMurmur2 (also used by kafkajs, librdkafka's
# rdmurmur2.c and the Dart/Akka ports); signed Java ints.
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    # Akka's Murmur2Spec, "expected correct hash values from the kafka murmur2 impl"
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2.items(), ids=repr)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_is_a_signed_32_bit_int(data: bytes) -> None:
    h = murmur2(data)
    assert -(2**31) <= h < 2**31


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2.items(), ids=repr)
def test_java_partition_is_to_positive_modulo(data: bytes, expected: int) -> None:
    for n in (1, 3, 12, 100):
        assert java_partition(data, n) == (expected & 0x7FFFFFFF) % n
    assert to_positive(-1) == 0x7FFFFFFF


def test_java_partition_refuses_no_partitions() -> None:
    with pytest.raises(ValueError, match="positive"):
        java_partition(b"a", 0)


def test_keys_are_compact_json_arrays() -> None:
    assert encode_key("shop", "orders", (42,)) == b'["shop","orders",42]'
    assert encode_key("shop", "orders", ("é", 2**64 - 1)) == (
        '["shop","orders","é",18446744073709551615]'.encode()
    )
    assert encode_key("s", "t", (dt.date(2024, 1, 2), Decimal("1.10"))) == (
        b'["s","t",{"date":"2024-01-02"},{"decimal":"1.10"}]'
    )
    assert encode_key("s", None) == b'["s",null]'


TABLE = TableSchema(
    "shop",
    "orders",
    (
        ColumnSchema("id", "bigint", nullable=False),
        ColumnSchema("shard", "int"),
        ColumnSchema("note", "varchar", length=64),
    ),
    ("id",),
)


def row(op: Op, before: tuple | None, after: tuple | None, table: TableSchema = TABLE) -> RowChange:
    return RowChange(
        source="db1",
        ts=5,
        op=op,
        schema=table.schema,
        table=table.table,
        schema_id=table.schema_id,
        primary_key=table.primary_key,
        before=before,
        after=after,
        txn=TxnRef("t", 0),
        position=BinlogPosition("f", 4),
    )


def test_rows_are_keyed_and_placed_by_primary_key_by_default() -> None:
    p = Partitioner(12)
    key, part = p.partition_row(row(Op.INSERT, None, (42, 3, "x")), TABLE)
    assert key == b'["shop","orders",42]'
    assert part == java_partition(key, 12)
    # a delete is keyed by its before image: the same row, the same partition
    assert p.partition_row(row(Op.DELETE, (42, 9, "y"), None), TABLE) == (key, part)


def test_by_table_puts_a_whole_table_in_one_partition() -> None:
    p = Partitioner(12, {"shop.ord*": Dispatch(DispatchRule.BY_TABLE)})
    parts = {p.partition_row(row(Op.INSERT, None, (i, 0, "")), TABLE)[1] for i in range(50)}
    assert parts == {java_partition(b'["shop","orders"]', 12)}
    key, _ = p.partition_row(row(Op.INSERT, None, (7, 0, "")), TABLE)
    assert key == b'["shop","orders",7]'  # the key stays the row's


def test_by_columns_places_by_the_chosen_columns() -> None:
    p = Partitioner(12, {"*.*": Dispatch(DispatchRule.BY_COLUMNS, ("shard",))})
    _, part = p.partition_row(row(Op.INSERT, None, (1, 3, "")), TABLE)
    assert part == java_partition(b'["shop","orders",3]', 12)
    with pytest.raises(ValueError, match="BY_COLUMNS needs columns"):
        Dispatch(DispatchRule.BY_COLUMNS)
    bad = Partitioner(3, {"*": Dispatch(DispatchRule.BY_COLUMNS, ("nope",))})
    with pytest.raises(ProtocolError, match=r"not all in shop\.orders"):
        bad.partition_row(row(Op.INSERT, None, (1, 3, "")), TABLE)


def test_a_table_without_primary_key_goes_by_table() -> None:
    table = TableSchema("s", "log", (ColumnSchema("msg", "text"),), ())
    key, part = Partitioner(5).partition_row(row(Op.INSERT, None, ("hi",), table), table)
    assert key == b'["s","log"]'
    assert part == java_partition(b'["s","log"]', 5)


def test_a_row_that_does_not_match_its_table_schema_is_refused() -> None:
    with pytest.raises(ProtocolError, match="does not match table schema"):
        Partitioner(3).partition_row(row(Op.INSERT, None, (1, 2)), TABLE)


def test_key_changes_are_detected() -> None:
    p = Partitioner(8)
    assert p.key_changed(row(Op.UPDATE, (1, 0, "a"), (2, 0, "a")), TABLE)
    assert not p.key_changed(row(Op.UPDATE, (1, 0, "a"), (1, 5, "b")), TABLE)
    assert not p.key_changed(row(Op.INSERT, None, (1, 0, "a")), TABLE)


def test_ddl_and_watermarks_go_to_every_partition() -> None:
    p = Partitioner(4)
    pos = BinlogPosition("f", 4)
    ddl = DdlChange(
        source="db1",
        ts=1,
        schema="shop",
        table="orders",
        statement="ALTER TABLE orders ADD c INT",
        table_schema=TABLE,
        position=pos,
    )
    assert p.route(ddl) == [(b'["shop","orders"]', n) for n in range(4)]
    assert p.route(Resolved(source="db1", ts=1)) == [(None, n) for n in range(4)]
    hb = Heartbeat(source="db1", ts=1, reader_id="r", position=pos, lag_ms=0)
    assert p.route(hb) == [(None, n) for n in range(4)]
    r = row(Op.INSERT, None, (42, 3, "x"))
    assert p.route(r, TABLE) == [p.partition_row(r, TABLE)]
    with pytest.raises(ProtocolError, match="needs its schema"):
        p.route(r)


@given(
    values=st.lists(
        st.one_of(
            st.integers(-(2**63), 2**64 - 1),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
            st.binary(max_size=8),
            st.dates(),
            st.decimals(allow_nan=False, allow_infinity=False),
        ),
        min_size=3,
        max_size=3,
    ),
    partitions=st.integers(1, 64),
)
def test_a_row_keeps_its_partition_through_insert_update_delete(
    values: list[object], partitions: int
) -> None:
    table = TableSchema(
        "s",
        "t",
        (ColumnSchema("a", "x"), ColumnSchema("b", "x"), ColumnSchema("c", "x")),
        ("a", "b"),
    )
    p = Partitioner(partitions)
    img = tuple(values)
    changed = (*img[:2], "other")
    placed = {
        p.partition_row(row(Op.INSERT, None, img, table), table),
        p.partition_row(row(Op.UPDATE, img, changed, table), table),
        p.partition_row(row(Op.DELETE, changed, None, table), table),
    }
    assert len(placed) == 1
    ((key, part),) = placed
    assert 0 <= part < partitions
    assert part == java_partition(encode_key("s", "t", img[:2]), partitions)
    assert key == encode_key("s", "t", img[:2])
