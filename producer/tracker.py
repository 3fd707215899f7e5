"""What the binlog's table map does not carry, tracked per table in binlog order.

FULL row metadata gives a table's columns, types, lengths, nullability, collations and primary
key exactly as they were when each row was written. It does not give column DEFAULTs nor the
secondary (UNIQUE or not) indexes, which a consumer needs to rebuild a table (``ADD COLUMN c INT
NOT NULL DEFAULT 7``: rows untouched since read 7). `SchemaTracker` keeps those *extras* per
table and completes every table-map schema with them:

- a table is loaded from the live server the first time the reader meets it;
- each DDL that touches a table reloads its extras **when the reader reads the DDL** (RENAME
  moves them, DROP forgets them), so rows after the DDL get the extras after it;
- extras only apply to what the binlog layout confirms: a default to a column of that name that
  exists in the table map, an index only if all its columns exist.

Limit (documented in PROTOCOL.md §1.1): when the reader is far behind and the live table has
already gone past *later* DDLs, the extras read at the DDL are those of the later state (column
layouts, types and keys still come from the binlog and are exact). A shadow schema that replays
each DDL's text (as TiCDC and DM do) would remove this; it is not built yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rowbus.protocol.ddl import DdlKind, ParsedDdl, TableName
from rowbus.protocol.events import IndexSchema, TableSchema

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Extras:
    """Column defaults (column name → DEFAULT text, None for no DEFAULT clause) and the
    secondary indexes of one table."""

    defaults: Mapping[str, str | None]
    indexes: tuple[IndexSchema, ...]


Fetch = Callable[[str, str], Extras | None]
"""Reads a table's extras from the live server (None: the table does not exist)."""


class SchemaTracker:
    def __init__(self, fetch: Fetch, limit: int = 100_000) -> None:
        self._fetch = fetch
        self._extras: dict[TableName, Extras | None] = {}
        self._generation: dict[TableName, int] = {}
        self._limit = limit

    def generation(self, schema: str, table: str) -> int:
        """Grows each time a DDL changes the table's extras (a cache key for complete schemas)."""
        return self._generation.get(TableName(schema, table), 0)

    def _load(self, name: TableName) -> Extras | None:
        if len(self._extras) >= self._limit:
            self._extras.clear()
        found = self._extras[name] = self._fetch(name.schema, name.table)
        self._generation[name] = self._generation.get(name, 0) + 1
        return found

    def on_ddl(self, parsed: ParsedDdl) -> None:
        """Update the extras of the tables `parsed` touches (called as the DDL is read)."""
        if parsed.kind in (DdlKind.DROP_DATABASE, DdlKind.CREATE_DATABASE):
            gone = [n for n in self._extras if n.schema == parsed.database]
            for name in gone:
                self._forget(name)
            return
        if parsed.kind is DdlKind.DROP_TABLE:
            for name in parsed.tables:
                self._forget(name)
            return
        if parsed.kind in (DdlKind.OTHER, DdlKind.ALTER_DATABASE, DdlKind.TRUNCATE_TABLE):
            return
        for old, _new in parsed.renames:
            self._forget(old)
        for name in parsed.touched:
            if name not in (old for old, _ in parsed.renames):
                self._load(name)

    def _forget(self, name: TableName) -> None:
        self._extras.pop(name, None)
        self._generation[name] = self._generation.get(name, 0) + 1

    def complete(self, table: TableSchema) -> TableSchema:
        """`table` (from a table map) with the defaults and indexes the layout confirms."""
        name = TableName(table.schema, table.table)
        extras = self._extras[name] if name in self._extras else self._load(name)
        if extras is None:
            return table
        columns = tuple(
            replace(c, default=extras.defaults[c.name]) if c.name in extras.defaults else c
            for c in table.columns
        )
        present = set(table.column_names)
        indexes = tuple(i for i in extras.indexes if set(i.columns) <= present)
        return replace(table, columns=columns, indexes=indexes)
