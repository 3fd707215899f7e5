"""Tables rebuilt in memory from the protocol alone, and a table's schema as the source has it.

`Rebuild` applies a Subscriber's transactions: rows by primary key, and each DDL by its kind and
its table schema — column defaults fill a column added to rows written before it, column renames
come from the statement (`rowbus.protocol.ddl`), TRUNCATE empties, RENAME moves, DROP forgets.
`describe` reads what ``SHOW CREATE TABLE`` shows from information_schema, and `described` says
the same of a protocol `TableSchema`, so the two compare column for column.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rowbus.protocol.ddl import DdlKind, TableName, parse_ddl
from rowbus.protocol.events import ColumnSchema, DdlChange, Op, RowChange, TableSchema
from rowbus.protocol.values import Value

Row = dict[str, Value]
_INTS = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")


def default_value(col: ColumnSchema) -> Value:
    """The value a DEFAULT gives a row that predates its column (None without a default)."""
    text = col.default
    if text is None or text.upper() == "NULL":
        return None
    if text.startswith("'"):
        return text[1:-1].replace("''", "'").replace("\\\\", "\\")
    if col.type in _INTS:
        return int(text)
    if col.type == "decimal":
        return Decimal(text)
    if col.type in ("float", "double"):
        return float(text)
    raise AssertionError(f"default {text!r} of {col.name} is an expression")


class Rebuild:
    def __init__(self) -> None:
        self.tables: dict[TableName, tuple[TableSchema | None, dict[tuple[Value, ...], Row]]] = {}

    def apply(self, event: RowChange | DdlChange, table: TableSchema | None) -> None:
        if isinstance(event, DdlChange):
            self._ddl(event)
            return
        assert table is not None
        name = TableName(event.schema, event.table)
        _schema, rows = self.tables.setdefault(name, (table, {}))
        self.tables[name] = (table, rows)
        if event.op is not Op.INSERT:
            before = table.image_dict(event.before)  # type: ignore[arg-type]
            rows.pop(tuple(before[k] for k in table.primary_key), None)
        if event.op is not Op.DELETE:
            after = table.image_dict(event.after)  # type: ignore[arg-type]
            rows[tuple(after[k] for k in table.primary_key)] = after

    def _ddl(self, ev: DdlChange) -> None:
        parsed = parse_ddl(ev.statement, ev.schema)
        kind = ev.kind
        assert kind is not None, "a 1.1 reader sends the DDL kind"
        assert kind is parsed.kind
        if kind is DdlKind.DROP_DATABASE:
            for name in [n for n in self.tables if n.schema == parsed.database]:
                del self.tables[name]
            return
        if kind is DdlKind.DROP_TABLE:
            for name in parsed.tables:
                self.tables.pop(name, None)
            return
        if kind is DdlKind.RENAME_TABLE or parsed.renames:
            for old, new in parsed.renames:
                self.tables[new] = self.tables.pop(old)
        name = parsed.table
        if name is None:
            return
        if kind in (DdlKind.CREATE_TABLE, DdlKind.CREATE_TABLE_LIKE):
            self.tables[name] = (ev.table_schema, {})
            return
        if kind is DdlKind.TRUNCATE_TABLE:
            self.tables[name] = (self.tables[name][0], {})
            return
        before, rows = self.tables[name]
        renamed = dict(parsed.column_renames)
        rows = {key: {renamed.get(k, k): v for k, v in row.items()} for key, row in rows.items()}
        after = ev.table_schema
        if after is None:
            # The layout after this DDL is not knowable (another DDL of the table followed
            # before any row): keep the rows by their (renamed) column names; the next DDL's
            # or row's schema gives the layout.
            self.tables[name] = (before, rows)
            return
        new_rows: dict[tuple[Value, ...], Row] = {}
        for row in rows.values():
            new = {
                c.name: row[c.name] if c.name in row else default_value(c) for c in after.columns
            }
            new_rows[tuple(new[k] for k in after.primary_key)] = new
        self.tables[name] = (after, new_rows)


def _lower_type(text: str) -> str:
    """A column type in lower case, except its ENUM/SET members (their case is data)."""
    base, paren, rest = text.partition("(")
    return base.lower() + paren + (rest if "'" in rest else rest.lower())


def describe(cur: Any, schema: str, table: str) -> dict[str, Any]:
    """Columns (name, type with its parameters, nullability, default, collation), the primary
    key and the other indexes of a live table."""
    cur.execute(
        "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, COLLATION_NAME "
        "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
        "ORDER BY ORDINAL_POSITION",
        (schema, table),
    )
    columns = [(n, _lower_type(str(t)), nl == "YES", d, c) for n, t, nl, d, c in cur.fetchall()]
    cur.execute(
        "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (schema, table),
    )
    indexes: dict[str, tuple[bool, list[str]]] = {}
    for index, non_unique, column in cur.fetchall():
        indexes.setdefault(index, (not int(non_unique), []))[1].append(column)
    return {
        "columns": columns,
        "primary_key": indexes.pop("PRIMARY", (True, []))[1],
        "indexes": sorted((n, u, c) for n, (u, c) in indexes.items()),
    }


_PARAMS = re.compile(r"^(?P<base>[a-z]+)(?:\((?P<args>[^)]*)\))?(?P<rest>.*)$")


def described(table: TableSchema) -> dict[str, Any]:
    """What `describe` would say of a table, from its protocol schema alone."""
    columns = []
    for c in table.columns:
        columns.append((c.name, column_type(c), c.nullable, c.default, c.collation))
    return {
        "columns": columns,
        "primary_key": list(table.primary_key),
        "indexes": sorted((i.name, i.unique, list(i.columns)) for i in table.indexes),
    }


def column_type(c: ColumnSchema) -> str:
    """information_schema's COLUMN_TYPE of a column, from its protocol parameters."""
    t = c.type
    if t in ("char", "varchar", "binary", "varbinary"):
        text = f"{t}({c.length})"
    elif t == "decimal":
        text = f"decimal({c.precision},{c.scale})"
    elif t in ("datetime", "timestamp", "time"):
        text = f"{t}({c.fsp})" if c.fsp else t
    elif t in ("enum", "set"):
        members = ",".join("'" + e.replace("'", "''") + "'" for e in c.elements)
        text = f"{t}({members})"
    elif t == "bit":
        text = f"bit({c.length})"
    elif t in _INTS and t != "year":
        width = {"tinyint": 4, "smallint": 6, "mediumint": 9, "int": 11, "bigint": 20}[t]
        text = f"{t}({width - 1 if c.unsigned and t != 'bigint' else width})"
    else:
        text = t
    return text + (" unsigned" if c.unsigned else "")
