"""Snapshot markers (PROTOCOL.md §9.7) applied to a MySQL/MariaDB sink, as statements.

A snapshot of a table ends with the table holding exactly the rows seen since its begin: read
rows and streamed inserts and updates. The seen set of a keyed table lives in the sink, as a
table of the target's key columns (`seen_table`) beside the target:

- at the begin, `begin_ddl` (re)creates it empty — DDL, run before the begin's sink
  transaction: a replayed begin (its checkpoint not committed) finds nothing of the snapshot
  committed after it, so starting over empty is right;
- every applied row of the table adds its key (`seen_statements`, ``INSERT IGNORE``) in the same
  sink transaction as the row and the checkpoint, so the set is exactly as durable as the rows;
- at the end, one set-based ``DELETE`` (`end_statements`) in the end's transaction removes every
  row whose key is not in the set; `end_ddl` drops the set after that transaction commits.

So the seen set costs sink disk, never memory: a snapshot of a table of a million rows keeps a
million keys in a table, not in the apply job or its checkpoint. Which tables have a snapshot
running is the set of seen tables present (`running_sql` after a restart). A keyless table is
emptied in the begin's transaction instead (`begin_keyless`; its rows, identified by all
columns, are then inserted, PROTOCOL.md §9.3); it needs no set.

A target that merges several upstream tables (shards) is not touched by a marker: the snapshot
of one shard says nothing of the rows the others wrote there (the caller skips it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence

from rowbus.clients.mysql import quote
from rowbus.protocol.values import Value
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import STATEMENT_BYTES
from rowbus.spark_apply.literals import chunks, literal, row_literal

SEEN_PREFIX = "_rowbus_seen_"
"""The name prefix of a seen-key table; its comment names the target table."""


def seen_table(target: Target) -> Target:
    """The seen-key table of `target`, in its database (a hash keeps the name within 64)."""
    digest = hashlib.sha1(target.table.encode("utf-8"), usedforsecurity=False).hexdigest()
    return Target(target.schema, SEEN_PREFIX + digest[:24])


def _comment(target: Target) -> str:
    return literal(target.table)


def begin_ddl(target: Target, key_columns: Sequence[str]) -> list[str]:
    """The statements that make `target`'s seen set, empty (each commits implicitly)."""
    seen = seen_table(target).quoted
    keys = ", ".join(quote(c) for c in key_columns)
    return [
        f"DROP TABLE IF EXISTS {seen}",
        f"CREATE TABLE {seen} (PRIMARY KEY ({keys})) COMMENT={_comment(target)} "
        f"SELECT {keys} FROM {target.quoted} LIMIT 0",
    ]


def begin_keyless(target: Target) -> str:
    """Empties a keyless `target` (in the begin's sink transaction)."""
    return f"DELETE FROM {target.quoted}"


def seen_statements(
    target: Target,
    key_columns: Sequence[str],
    keys: Iterable[Sequence[Value]],
    max_bytes: int = STATEMENT_BYTES,
) -> Iterator[str]:
    """``INSERT IGNORE`` of `keys` into `target`'s seen set (in the rows' sink transaction)."""
    cols = ", ".join(quote(c) for c in key_columns)
    head = f"INSERT IGNORE INTO {seen_table(target).quoted} ({cols}) VALUES "
    return chunks(head, "", map(row_literal, keys), max_bytes)


def end_statements(target: Target, key_columns: Sequence[str]) -> list[str]:
    """The ``DELETE`` of every row of `target` whose key is not in its seen set (in the end's
    sink transaction): one statement, set-based, on the key index."""
    seen = seen_table(target).quoted
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in key_columns)
    first = quote(key_columns[0])
    return [
        f"DELETE t FROM {target.quoted} AS t LEFT JOIN {seen} AS s ON {on} WHERE s.{first} IS NULL"
    ]


def end_ddl(target: Target) -> str:
    """Drops `target`'s seen set (after the end's transaction committed)."""
    return f"DROP TABLE IF EXISTS {seen_table(target).quoted}"


def key_sql(target: Target) -> str:
    """A query of `target`'s primary key columns, in key order, and then one row ``(NULL)``
    when the table exists: no row, no table (a first snapshot into an empty sink: no row there
    to delete, so no seen set is needed); only the ``NULL`` row, a keyless table."""
    where = f"table_schema = {literal(target.schema)} AND table_name = {literal(target.table)}"
    return (
        "SELECT column_name FROM (SELECT column_name, ordinal_position AS n "
        f"FROM information_schema.key_column_usage WHERE {where} "
        "AND constraint_name = 'PRIMARY' "
        f"UNION ALL SELECT NULL, 1000000 FROM information_schema.tables WHERE {where}) AS k "
        "ORDER BY n"
    )


def running_sql(schemas: Sequence[str]) -> str:
    """A query of (database, target table) for every seen set present in `schemas`: the
    snapshots running when a sink is opened."""
    names = ", ".join(literal(s) for s in schemas) or "NULL"
    prefix = SEEN_PREFIX.replace("_", "\\_")
    return (
        "SELECT table_schema, table_comment FROM information_schema.tables "
        f"WHERE table_schema IN ({names}) AND table_name LIKE {literal(prefix + '%')}"
    )
