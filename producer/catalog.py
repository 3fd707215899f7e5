"""The source's tables as its server shows them now: information_schema read for live schemas.

`SourceCatalog` answers, over its server's control connection, what the binlog does not carry:
a table's current schema (a DDL's resulting table, a snapshot's tables), its CREATE statements
(a definition published before a table's first rows, PROTOCOL.md §9.6), the defaults, indexes
and collations the shadow schema tracker needs, each charset's default collation, and the
foreign keys whose changes the binlog does not show.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rowbus.producer.ddl.apply import Charsets
from rowbus.producer.definitions import create_statements
from rowbus.producer.tables import CHAR_TYPES
from rowbus.producer.tracker import Extras
from rowbus.protocol.events import ColumnSchema, IndexSchema, TableSchema

if TYPE_CHECKING:
    from rowbus.producer.server import SourceServer

_ENUM_ELEMENTS = re.compile(r"'((?:[^'\\]|''|\\.)*)'")
_ESCAPES = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_ESCAPED = re.compile(r"''|\\(.)")


def _member(quoted: str) -> str:
    """An ENUM/SET member as COLUMN_TYPE spells it ('' for a quote, a backslash escaping)."""
    return _ESCAPED.sub(lambda m: "'" if m.group(1) is None else _ESCAPES.get(m[1], m[1]), quoted)


class SourceCatalog:
    """The live tables of the server `server` is connected to (it connects on first use)."""

    def __init__(self, server: SourceServer) -> None:
        self._server = server

    def table_schema(self, schema: str, table: str) -> TableSchema | None:
        """The table's current schema from information_schema (None if it does not exist)."""
        rows = self._server.query_all(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_MAXIMUM_LENGTH, "
            "COLLATION_NAME, COLUMN_DEFAULT "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
            "ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        if not rows:
            return None
        cols = []
        for name, data_type, ctype, nullable, prec, scale, fsp, charset, chars, coll, dflt in rows:
            dtype = str(data_type).lower()
            ctype_s = str(ctype).lower()
            elements: tuple[str, ...] = ()
            if dtype in ("enum", "set"):
                elements = tuple(_member(e) for e in _ENUM_ELEMENTS.findall(str(ctype)))
            bits = None
            if dtype == "bit":
                m = re.search(r"\((\d+)\)", ctype_s)
                bits = int(m.group(1)) if m else 1
            if dtype == "longtext" and "json" in ctype_s:
                dtype = "json"
            cols.append(
                ColumnSchema(
                    name=str(name),
                    type=dtype,
                    unsigned="unsigned" in ctype_s,
                    nullable=str(nullable).upper() == "YES",
                    length=bits
                    if dtype == "bit"
                    else (int(chars) if dtype in CHAR_TYPES and chars is not None else None),
                    precision=int(prec) if dtype == "decimal" and prec is not None else None,
                    scale=int(scale) if dtype == "decimal" and scale is not None else None,
                    fsp=int(fsp)
                    if dtype in ("datetime", "timestamp", "time") and fsp is not None
                    else None,
                    charset=str(charset) if charset and charset != "binary" else None,
                    elements=elements,
                    default=None if dflt is None else str(dflt),
                    collation=str(coll) if coll and charset and charset != "binary" else None,
                )
            )
        pk_rows = self._server.query_all(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, table),
        )
        return TableSchema(
            schema,
            table,
            tuple(cols),
            tuple(str(r[0]) for r in pk_rows),
            self._indexes(schema, table),
        )

    def _indexes(self, schema: str, table: str) -> tuple[IndexSchema, ...]:
        rows = self._server.query_all(
            "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND INDEX_NAME <> 'PRIMARY' "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
            (schema, table),
        )
        found: dict[str, tuple[list[str], bool]] = {}
        for index, non_unique, column in rows:
            found.setdefault(str(index), ([], not int(non_unique)))[0].append(str(column))
        return tuple(IndexSchema(n, tuple(c), u) for n, (c, u) in sorted(found.items()))

    def create_statements(self, schema: str, table: str) -> list[str]:
        """The table's database's and its own CREATE … IF NOT EXISTS, as the server shows them
        now (a definition published before a table's first streamed row, PROTOCOL.md §9.6)."""
        with self._server.cursor(f"reading the definition of {schema}.{table}") as cur:
            return create_statements(cur, schema, table)

    def table_extras(self, schema: str, table: str) -> Extras | None:
        """What the table map lacks (defaults, secondary indexes), read now from the server."""
        rows = self._server.query_all(
            "SELECT COLUMN_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        if not rows:
            return None
        defaults = {str(n): None if d is None else str(d) for n, d in rows}
        found = self._server.query_one(
            "SELECT TABLE_COLLATION FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        collation = str(found[0]) if found and found[0] else None
        return Extras(defaults, self._indexes(schema, table), collation)

    def cascading_foreign_keys(self) -> list[tuple[str, str, str]]:
        """(child table, parent table, rule) of each foreign key that changes rows itself (ON
        DELETE/UPDATE CASCADE or SET NULL): the server makes those changes below its row
        log, so the binlog — and every consumer — does not see them."""
        rows = self._server.query_all(
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
            "REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE "
            "FROM information_schema.REFERENTIAL_CONSTRAINTS "
            "WHERE DELETE_RULE IN ('CASCADE', 'SET NULL') OR UPDATE_RULE IN ('CASCADE', 'SET NULL')"
        )
        out = []
        for schema, table, pschema, ptable, on_delete, on_update in rows:
            rule = ", ".join(
                f"ON {what} {r}"
                for what, r in (("DELETE", on_delete), ("UPDATE", on_update))
                if r in ("CASCADE", "SET NULL")
            )
            out.append((f"{schema}.{table}", f"{pschema}.{ptable}", rule))
        return out

    def database_collation(self, database: str) -> str | None:
        """A database's default collation now (None: no such database)."""
        found = self._server.query_one(
            "SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=%s",
            (database,),
        )
        return str(found[0]) if found and found[0] else None

    def charsets(self) -> Charsets:
        """Each charset's default collation (a server fact, read once per term); on MySQL,
        JSON is a type of its own (its table map says json, not longtext)."""
        rows = self._server.query_all(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS "
            "WHERE IS_DEFAULT='Yes'"
        )
        defaults = {str(cs): str(coll) for cs, coll in rows}
        return Charsets(defaults, native_json=not self._server.mariadb)
