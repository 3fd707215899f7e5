"""Debezium's schema-change records (pure): ``tableChanges`` as Debezium 3.6.3's MySQL connector
writes it (the expected columns are its own output for the fidelity corpus on MariaDB 10.11,
captured by ``python -m benchmarks.debezium_diff``), the record's Connect schema and position."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.debezium_history import CHANGE_SCHEMA, column_change, table_change
from rowbus.protocol.events import BinlogPosition, ColumnSchema, DdlChange, TableSchema, TxnRef

ID = ColumnSchema("id", "int", nullable=False)


def _debezium(name: str, jdbc: int, type_name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "jdbcType": jdbc,
        "nativeType": None,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": None,
        "length": None,
        "scale": None,
        "position": 2,
        "optional": True,
        "autoIncremented": False,
        "generated": False,
        "comment": None,
        "defaultValueExpression": None,
        "enumValues": None,
        **extra,
    }


@pytest.mark.parametrize(
    ("col", "expected"),
    [
        (ColumnSchema("v", "tinyint"), _debezium("v", 5, "TINYINT")),
        (
            ColumnSchema("v", "mediumint", unsigned=True),
            _debezium("v", 4, "MEDIUMINT UNSIGNED"),
        ),
        (
            ColumnSchema("v", "decimal", precision=5, scale=5),
            _debezium("v", 3, "DECIMAL", length=5, scale=5),
        ),
        (ColumnSchema("v", "float"), _debezium("v", 6, "FLOAT")),
        (ColumnSchema("v", "bit", length=64), _debezium("v", -7, "BIT", length=64)),
        (
            ColumnSchema("v", "char", length=5, charset="utf8mb4", collation="utf8mb4_bin"),
            _debezium("v", 1, "CHAR", length=5, charsetName="utf8mb4"),
        ),
        (ColumnSchema("v", "datetime", fsp=6), _debezium("v", 93, "DATETIME", length=6)),
        (ColumnSchema("v", "timestamp", fsp=6), _debezium("v", 2014, "TIMESTAMP", length=6)),
        (ColumnSchema("v", "time", fsp=0), _debezium("v", 92, "TIME")),
        (ColumnSchema("v", "year", unsigned=True), _debezium("v", 4, "YEAR")),
        (
            ColumnSchema(
                "v", "set", charset="utf8mb4", collation="utf8mb4_bin", elements=("x", "y", "z")
            ),
            _debezium(
                "v", 1, "SET", charsetName="utf8mb4", length=5, enumValues=["'x'", "'y'", "'z'"]
            ),
        ),
        (
            ColumnSchema("v", "enum", charset="utf8mb4", collation="utf8mb4_bin", elements=("a",)),
            _debezium("v", 1, "ENUM", charsetName="utf8mb4", length=1, enumValues=["'a'"]),
        ),
        (
            ColumnSchema("v", "int", nullable=False, default="7"),
            _debezium("v", 4, "INT", optional=False, defaultValueExpression="7"),
        ),
    ],
)
def test_columns_are_described_as_debezium_describes_them(
    col: ColumnSchema, expected: dict[str, Any]
) -> None:
    table = TableSchema("db", "t", (ID, col), ("id",))
    assert column_change(col, 2, table) == expected


def test_a_create_an_alter_and_a_drop() -> None:
    table = TableSchema("db", "t", (ID, ColumnSchema("v", "int")), ("id",))
    created = table_change(DdlKind.CREATE_TABLE, "db", "t", table)
    assert created["type"] == "CREATE"
    assert created["id"] == '"db"."t"'
    assert created["table"]["primaryKeyColumnNames"] == ["id"]
    assert [c["name"] for c in created["table"]["columns"]] == ["id", "v"]
    assert created["table"]["columns"][0]["optional"] is False
    assert table_change(DdlKind.TRUNCATE_TABLE, "db", "t", table)["type"] == "ALTER"
    assert table_change(DdlKind.DROP_TABLE, "db", "t", None) == {
        "type": "DROP",
        "id": '"db"."t"',
        "table": None,
    }


def test_the_record_carries_the_table_after_the_statement_at_its_event() -> None:
    table = TableSchema("db", "t", (ID,), ("id",))
    ddl = DdlChange(
        kind=DdlKind.ALTER_TABLE,
        source="src",
        ts=1_795_727_077_000 << 16,
        schema="db",
        table="t",
        statement="ALTER TABLE t DROP COLUMN v",
        table_schema=table,
        position=BinlogPosition("binlog.000001", 900, "0-1-9"),
        txn=TxnRef("0-1-9", 0),
    )
    key, value = DebeziumRenderer(DebeziumOptions("dbz")).schema_change(ddl, event_start=812)
    record = json.loads(value)
    assert json.loads(key)["payload"] == {"databaseName": "db"}
    payload = record["payload"]
    assert payload["source"]["pos"] == 812
    assert payload["tableChanges"] == [table_change(DdlKind.ALTER_TABLE, "db", "t", table)]
    changes = record["schema"]["fields"][-1]
    assert changes["field"] == "tableChanges"
    assert changes["items"] == CHANGE_SCHEMA
