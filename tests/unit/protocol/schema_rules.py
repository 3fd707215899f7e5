"""The rules PROTOCOL.md §1.1 sets on a table schema's fields, as one checker: the golden
vectors and the schemas the real reader publishes (the schema-change matrix) must obey them,
so a third party computing schema ids from the text gets the ids rowbus sends."""

from __future__ import annotations

from rowbus.protocol.events import TableSchema

CHARACTER_TYPES = frozenset(
    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
)


def violations(table: TableSchema) -> list[str]:
    """What in `table` breaks §1.1 (empty: nothing)."""
    found = []
    names = [i.name for i in table.indexes]
    if names != sorted(names):
        found.append(f"{table.qualified}: indexes not sorted by name: {names}")
    for c in table.columns:
        if (c.charset is None) != (c.collation is None):
            found.append(f"{table.qualified}.{c.name}: charset {c.charset} collation {c.collation}")
        if c.nullable and c.default is None:
            found.append(f"{table.qualified}.{c.name}: nullable without a default (not NULL)")
        if c.charset is not None and c.type not in CHARACTER_TYPES:
            found.append(f"{table.qualified}.{c.name}: a {c.type} with charset {c.charset}")
    return found
