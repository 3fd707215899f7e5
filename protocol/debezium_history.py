"""Debezium's schema-change records (pure): the value of the ``<prefix>`` topic for one DDL,
with its ``tableChanges`` — the table after the statement as Debezium's MySQL connector
describes it (`table_change`) — built from rowbus's `TableSchema`.

Debezium describes a column by its DDL spelling (its parser's); rowbus by the binlog's table
map and information_schema. Where the two cannot agree (``BOOL`` is a TINYINT(1) to the
server, a JSON column of MariaDB is a LONGTEXT) rowbus says what the server says, and
docs/debezium.md lists the difference.
"""

from __future__ import annotations

import re
from typing import Any

from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.debezium_columns import Json
from rowbus.protocol.events import ColumnSchema, DdlChange, TableSchema

_CHANGE_TYPES = {
    DdlKind.CREATE_TABLE: "CREATE",
    DdlKind.CREATE_TABLE_LIKE: "CREATE",
    DdlKind.DROP_TABLE: "DROP",
}
"""Debezium's ``tableChanges[].type`` by statement kind; any other statement that leaves a
table is an ``ALTER`` of it."""

_JDBC_TYPES = {
    "char": 1,  # java.sql.Types.CHAR
    "varchar": 12,
    "tinytext": 12,
    "text": 12,
    "mediumtext": 12,
    "longtext": 12,
    "tinyint": 5,  # SMALLINT: Debezium widens TINYINT
    "smallint": 5,
    "mediumint": 4,
    "int": 4,
    "bigint": -5,
    "float": 6,
    "double": 8,
    "decimal": 3,
    "bit": -7,
    "time": 92,
    "timestamp": 2014,  # TIMESTAMP_WITH_TIMEZONE
    "datetime": 93,
    "date": 91,
    "year": 4,
    "binary": -2,
    "varbinary": -3,
    "tinyblob": 2004,
    "blob": 2004,
    "mediumblob": 2004,
    "longblob": 2004,
    "enum": 1,
    "set": 1,
    "json": 1111,  # OTHER
    "geometry": 1111,
}
"""java.sql.Types of each MySQL type as Debezium's DDL parser maps it."""

_SIZED = ("char", "varchar", "binary", "varbinary", "bit")
_FRACTIONAL = ("time", "datetime", "timestamp")


def _type_name(col: ColumnSchema) -> str:
    name = col.type.upper()
    # YEAR is unsigned to the binlog's metadata, not in its DDL.
    return f"{name} UNSIGNED" if col.unsigned and col.type != "year" else name


def _charset(col: ColumnSchema) -> str | None:
    return col.charset if col.collation is not None else None


def _length_scale(col: ColumnSchema) -> tuple[int | None, int | None]:
    """Debezium's ``length`` and ``scale``: the declared size, DECIMAL's precision and
    scale, a temporal type's fractional digits (as its length)."""
    if col.type == "decimal":
        return col.precision, col.scale
    if col.type in _SIZED:
        return col.length, None
    if col.type in _FRACTIONAL and col.fsp:
        return col.fsp, None
    # Debezium's parser sizes an ENUM as a CHAR (1) and a SET by its members and commas.
    if col.type == "enum":
        return 1, None
    if col.type == "set":
        return max(0, 2 * len(col.elements) - 1), None
    return None, None


def column_change(col: ColumnSchema, position: int, table: TableSchema) -> Json:
    """One column of ``tableChanges[].table.columns``."""
    length, scale = _length_scale(col)
    out: Json = {
        "name": col.name,
        "jdbcType": _JDBC_TYPES.get(col.type, 12),
        "nativeType": None,
        "typeName": _type_name(col),
        "typeExpression": _type_name(col),
        "charsetName": _charset(col),
        "length": length,
        "scale": scale,
        "position": position,
        "optional": col.nullable and col.name not in table.primary_key,
        "autoIncremented": False,
        "generated": False,
        "comment": None,
        "defaultValueExpression": _default_expression(col),
        "enumValues": [_quoted(m) for m in col.elements] if col.type in ("enum", "set") else None,
    }
    return out


def _quoted(member: str) -> str:
    """An ENUM or SET member as Debezium keeps it: its SQL literal, quotes included."""
    return "'" + member.replace("'", "''") + "'"


def _default_expression(col: ColumnSchema) -> str | None:
    """The DEFAULT as Debezium's parser keeps its text: a literal without its quotes (a BIT
    literal's digits), CURRENT_TIMESTAMP as the epoch; an expression (``(1 + 1)``,
    ``concat(…)``) none."""
    text = col.default
    if text is None or text.upper() == "NULL":
        return None
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text[:2].lower() == "b'" and text[-1] == "'":
        return text[2:-1]
    if text.lower().startswith("current_timestamp"):
        return "1970-01-01 00:00:00"
    return text if _NUMBER.fullmatch(text) else None


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def table_change(kind: DdlKind | None, schema: str, table: str, after: TableSchema | None) -> Json:
    """One element of ``tableChanges``: the change's type, the table's id and, but for a
    DROP, the table after the statement."""
    change_type = "ALTER" if kind is None else _CHANGE_TYPES.get(kind, "ALTER")
    body: Json | None = None
    if after is not None and change_type != "DROP":
        body = {
            # rowbus's schema knows each column's charset, not the table's default one.
            "defaultCharsetName": None,
            "primaryKeyColumnNames": list(after.primary_key),
            "columns": [column_change(c, i, after) for i, c in enumerate(after.columns, 1)],
            "comment": None,
        }
    return {"type": change_type, "id": f'"{schema}"."{table}"', "table": body}


def _optional(ctype: str, field: str, **extra: Any) -> Json:
    return {"type": ctype, "optional": True, **extra, "field": field}


def _required(ctype: str, field: str, **extra: Any) -> Json:
    return {"type": ctype, "optional": False, **extra, "field": field}


_STRINGS: Json = {"type": "array", "items": {"type": "string", "optional": False}}
_COLUMN_SCHEMA: Json = {
    "type": "struct",
    "fields": [
        _required("string", "name"),
        _required("int32", "jdbcType"),
        _optional("int32", "nativeType"),
        _required("string", "typeName"),
        _optional("string", "typeExpression"),
        _optional("string", "charsetName"),
        _optional("int32", "length"),
        _optional("int32", "scale"),
        _required("int32", "position"),
        _optional("boolean", "optional"),
        _optional("boolean", "autoIncremented"),
        _optional("boolean", "generated"),
        _optional("string", "comment"),
        _optional("string", "defaultValueExpression"),
        {**_STRINGS, "optional": True, "field": "enumValues"},
    ],
    "optional": False,
    "name": "io.debezium.connector.schema.Column",
    "version": 1,
}
_TABLE_SCHEMA: Json = {
    "type": "struct",
    "fields": [
        _optional("string", "defaultCharsetName"),
        {**_STRINGS, "optional": True, "field": "primaryKeyColumnNames"},
        {"type": "array", "items": _COLUMN_SCHEMA, "optional": False, "field": "columns"},
        _optional("string", "comment"),
    ],
    "optional": True,
    "name": "io.debezium.connector.schema.Table",
    "version": 1,
    "field": "table",
}
CHANGE_SCHEMA: Json = {
    "type": "struct",
    "fields": [_required("string", "type"), _required("string", "id"), _TABLE_SCHEMA],
    "optional": False,
    "name": "io.debezium.connector.schema.Change",
    "version": 1,
}
"""The Connect schema of one element of ``tableChanges``."""


def table_changes(ddl: DdlChange) -> list[Json]:
    """The ``tableChanges`` of a DDL's record: one change for a statement on one table, none
    for one on a database or on no table rowbus tracks."""
    if ddl.table is None:
        return []
    return [table_change(ddl.kind, ddl.schema, ddl.table, ddl.table_schema)]
