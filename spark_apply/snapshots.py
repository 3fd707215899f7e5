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
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rowbus.clients.mysql import quote
from rowbus.protocol.events import SnapshotBegin, SnapshotEnd
from rowbus.protocol.values import Value
from rowbus.routing.routes import Router, Target
from rowbus.spark_apply.changes import STATEMENT_BYTES
from rowbus.spark_apply.literals import chunks, literal, row_literal, row_of_literals

log = logging.getLogger(__name__)

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
    *,
    rendered: bool = False,
) -> Iterator[str]:
    """``INSERT IGNORE`` of `keys` into `target`'s seen set (in the rows' sink transaction).
    `rendered`: the keys hold literals (collapse's), not values."""
    cols = ", ".join(quote(c) for c in key_columns)
    head = f"INSERT IGNORE INTO {seen_table(target).quoted} ({cols}) VALUES "
    return chunks(head, "", map(row_of_literals if rendered else row_literal, keys), max_bytes)


def end_statements(target: Target, key_columns: Sequence[str]) -> list[str]:
    """The ``DELETE`` of every row of `target` whose key is not in its seen set (in the end's
    sink transaction): one statement, set-based, on the key index."""
    # One table and a correlated NOT EXISTS on the set's primary key (an anti-join): a
    # multi-table DELETE with aliases wants a default database on MariaDB (error 1046).
    seen = seen_table(target).quoted
    on = " AND ".join(f"s.{quote(c)} = {target.quoted}.{quote(c)}" for c in key_columns)
    return [f"DELETE FROM {target.quoted} WHERE NOT EXISTS (SELECT 1 FROM {seen} AS s WHERE {on})"]


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


def running_sql(schemas: Sequence[str] | None = None) -> str:
    """A query of (database, target table) for every seen set present (in `schemas`, or in
    every database): the snapshots running when a sink is opened."""
    prefix = SEEN_PREFIX.replace("_", "\\_")
    where = f"table_name LIKE {literal(prefix + '%')}"
    if schemas is not None:
        names = ", ".join(literal(s) for s in schemas) or "NULL"
        where += f" AND table_schema IN ({names})"
    return f"SELECT table_schema, table_comment FROM information_schema.tables WHERE {where}"


class SeenSets:
    """The snapshots running in one sink (target → its key columns) and how markers and rows
    change them; every method takes the cursor of the sink transaction it writes in. A
    marker's target comes from the routing rules; a sharded rule's target is left alone
    (module docstring). Lifecycle: `load` once the sink is open, then `begin` / `end` / `add`
    in release order on one thread (parallel shards only read `running` during a step)."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self.running: dict[Target, tuple[str, ...]] = {}

    def load(self, cur: Any) -> None:
        """The seen sets a previous run left (a snapshot that began and has not ended)."""
        cur.execute(running_sql())
        for schema, table in cur.fetchall():
            target = Target(str(schema), str(table))
            exists, keys = _keys(cur, target)
            if exists and keys:
                self.running[target] = keys

    def target(self, marker: SnapshotBegin | SnapshotEnd) -> Target | None:
        if self._router.sharded(marker.schema, marker.table, marker.source):
            log.warning(
                "%s of %s.%s (source %s) left alone: its target merges shards",
                type(marker).__name__,
                marker.schema,
                marker.table,
                marker.source,
            )
            return None
        return self._router.target(marker.schema, marker.table, marker.source)

    def begin(self, cur: Any, target: Target) -> None:
        """A `SnapshotBegin`: a keyed table's seen set made (DDL: it commits what `cur`'s
        transaction holds), a keyless table emptied in `cur`'s transaction; a table the sink
        does not hold yet needs neither (every row it will hold comes after)."""
        exists, keys = _keys(cur, target)
        if not exists:
            self.running.pop(target, None)
        elif not keys:
            cur.execute(begin_keyless(target))
        else:
            for sql in begin_ddl(target, keys):
                cur.execute(sql)
            self.running[target] = keys

    def end(self, cur: Any, target: Target) -> bool:
        """A `SnapshotEnd`: the rows not seen deleted in `cur`'s transaction; True when the
        seen set is to be dropped (`drop`) once that transaction committed."""
        keys = self.running.get(target)
        if keys is None:
            return False
        for sql in end_statements(target, keys):
            cur.execute(sql)
        return True

    def drop(self, cur: Any, target: Target) -> None:
        cur.execute(end_ddl(target))
        self.running.pop(target, None)

    def add(
        self,
        cur: Any,
        target: Target,
        rows: Iterable[tuple[Sequence[str], Sequence[Any]]],
        max_bytes: int = STATEMENT_BYTES,
    ) -> None:
        """The keys of upserted `rows` ((columns, literals) each) into `target`'s seen set,
        when a snapshot of it runs."""
        keys = self.running.get(target)
        if keys is None:
            return
        picked = []
        for columns, values in rows:
            by_name = dict(zip(columns, values, strict=True))
            picked.append([by_name[k] for k in keys])
        for sql in seen_statements(target, keys, picked, max_bytes, rendered=True):
            cur.execute(sql)


def _keys(cur: Any, target: Target) -> tuple[bool, tuple[str, ...]]:
    cur.execute(key_sql(target))
    names = [r[0] for r in cur.fetchall()]
    return bool(names), tuple(str(n) for n in names if n is not None)
