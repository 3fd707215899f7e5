"""The event model: schema ids, images by name, positions."""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, RowChange, TableSchema, TxnRef
from rowbus.protocol.values import Kind, format_time, kind_of, parse_time

TABLE = TableSchema(
    "shop",
    "orders",
    (ColumnSchema("id", "bigint", nullable=False), ColumnSchema("note", "varchar", length=64)),
    ("id",),
)


def test_schema_id_is_stable_and_documented() -> None:
    canonical = TABLE.canonical_bytes()
    assert canonical.startswith(
        b'{"columns":[{"charset":null,"collation":null,"default":null,"elements":[],"fsp":null,'
    )
    import hashlib

    assert TABLE.schema_id == int.from_bytes(hashlib.sha256(canonical).digest()[:8], "big") & (
        2**63 - 1
    )
    same = TableSchema.from_dict(TABLE.to_dict())
    assert same == TABLE
    assert same.schema_id == TABLE.schema_id
    other = TableSchema("shop", "orders", TABLE.columns[:1], ("id",))
    assert other.schema_id != TABLE.schema_id


def test_primary_key_must_name_columns() -> None:
    with pytest.raises(ValueError, match="not columns"):
        TableSchema("s", "t", (ColumnSchema("a", "int"),), ("b",))


def test_images_by_name() -> None:
    row = RowChange(
        source="db1",
        ts=1,
        op=Op.UPDATE,
        schema="shop",
        table="orders",
        schema_id=TABLE.schema_id,
        primary_key=("id",),
        before=(1, "a"),
        after=(1, "b"),
        txn=TxnRef("t", 0),
        position=BinlogPosition("f", 4),
    )
    assert row.before_dict(TABLE) == {"id": 1, "note": "a"}
    assert row.after_dict(TABLE) == {"id": 1, "note": "b"}
    assert row.image == (1, "b")
    with pytest.raises(ValueError, match="image has 1 values"):
        TABLE.image_dict((1,))


def test_position_text() -> None:
    assert str(BinlogPosition("binlog.000003", 154)) == "binlog.000003:154"
    assert str(BinlogPosition("b.1", 4, "u:1-5")) == "b.1:4 gtid=u:1-5"


def test_kinds() -> None:
    assert kind_of(None) is Kind.NULL
    assert kind_of(2**63) is Kind.UINT
    assert kind_of(dt.datetime(2020, 1, 1)) is Kind.DATETIME
    assert kind_of(dt.datetime(2020, 1, 1, tzinfo=dt.UTC)) is Kind.TIMESTAMP
    assert kind_of(dt.date(2020, 1, 1)) is Kind.DATE
    assert kind_of(-0.0) is Kind.DOUBLE
    assert not math.isnan(0.0)


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (dt.timedelta(0), "00:00:00"),
        (dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), "838:59:59.999999"),
        (-dt.timedelta(microseconds=1), "-00:00:00.000001"),
        (-dt.timedelta(hours=1, seconds=1, microseconds=500000), "-01:00:01.500000"),
    ],
)
def test_time_text(td: dt.timedelta, text: str) -> None:
    assert format_time(td) == text
    assert parse_time(text) == td


def test_order_key_grows_in_binlog_order() -> None:
    from rowbus.protocol.events import order_key

    def at(file: str, offset: int, index: int) -> RowChange:
        return RowChange(
            source="a",
            ts=1,
            op=Op.INSERT,
            schema="s",
            table="t",
            schema_id=1,
            primary_key=(),
            before=None,
            after=(1,),
            txn=TxnRef("x", index),
            position=BinlogPosition(file, offset),
        )

    keys = [
        order_key(at("binlog.000009", 500, 0)),
        order_key(at("binlog.000009", 500, 1)),
        order_key(at("binlog.000009", 900, 0)),
        order_key(at("binlog.000010", 4, 0)),
    ]
    assert keys == sorted(keys)
    assert len(set(keys)) == 4
    assert BinlogPosition("weird", 1).file_number == -1


def test_schema_ids_do_not_depend_on_the_order_a_value_lists_its_indexes() -> None:
    """§1.1: indexes sorted by name in code point order ('B' < 'a' < 'é'), whatever order a
    writer sent them in."""
    from rowbus.protocol.events import IndexSchema

    indexes = (IndexSchema("é", ("id",), False), IndexSchema("a", ("id",), True))
    listed = TableSchema("s", "t", TABLE.columns, ("id",), indexes)
    ordered = TableSchema("s", "t", TABLE.columns, ("id",), tuple(reversed(indexes)))
    upper = TableSchema("s", "t", TABLE.columns, ("id",), (IndexSchema("B", ("id",), False),))
    assert listed.canonical_bytes() == ordered.canonical_bytes()
    assert listed.schema_id == ordered.schema_id
    assert b'"indexes":[{"columns":["id"],"name":"a"' in listed.canonical_bytes()
    both = TableSchema("s", "t", TABLE.columns, ("id",), (*indexes, *upper.indexes))
    assert [i["name"] for i in json.loads(both.canonical_bytes())["indexes"]] == ["B", "a", "é"]


def test_the_golden_schemas_follow_the_text() -> None:
    """The vectors a third party checks against agree with §1.1's rules (they did not: a
    charset without a collation, a collation without a charset, unsorted indexes)."""
    from rowbus.protocol import golden
    from tests.unit.protocol.schema_rules import violations

    assert violations(golden.ALL_TYPES) == []
    assert violations(golden.EDGE_TYPES) == []
