"""What the MySQL sink's `information_schema` says of a target table, cached until a DDL.

Collapse (`changes.collapse`) and throughput mode's keying need, per target, its unique keys
(the primary key included: it may differ from the upstream one), its generated columns and
how the sink compares each column (`keys.Fold` of its collation). `SinkSchema` reads them on
a connection of its own and keeps them until the sink runs a DDL (`clear`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from pymysql.connections import Connection

from rowbus.routing.routes import Target
from rowbus.spark_apply.keys import Fold, fold_of
from rowbus.spark_apply.sink_conn import db_errors


class SinkSchema:
    """A target's unique keys, generated columns and column folds in the sink, cached; the
    connection is opened by the first lookup (`connect`) and closed by `close`."""

    def __init__(self, connect: Callable[[], Connection[Any]]) -> None:
        self._connect = connect
        self._conn: Connection[Any] | None = None
        self._unique: dict[Target, tuple[tuple[str, ...], ...]] = {}
        self._generated_columns: dict[Target, frozenset[str]] = {}
        self._column_folds: dict[Target, dict[str, Fold]] = {}

    def clear(self) -> None:
        """Forget what was read: a DDL may add or drop unique keys and generated columns."""
        self._unique.clear()
        self._generated_columns.clear()
        self._column_folds.clear()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def unique_keys(self, target: Target) -> tuple[tuple[str, ...], ...]:
        """The target's unique keys (the primary key included: it may differ from the
        upstream one), from the sink's information_schema; cached until the next DDL."""
        found = self._unique.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "unique keys",
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        )
        keys: dict[str, list[str]] = {}
        for index, column in rows:
            keys.setdefault(str(index), []).append(str(column))
        found = self._unique[target] = tuple(tuple(cols) for cols in keys.values())
        return found

    def generated(self, target: Target) -> frozenset[str]:
        """The target's generated columns (lower case), from the sink's information_schema
        (MariaDB: NULL expression for the others, MySQL: empty); cached until the next DDL."""
        found = self._generated_columns.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "generated columns",
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND COALESCE(GENERATION_EXPRESSION, '') <> ''",
        )
        found = self._generated_columns[target] = frozenset(str(r[0]).lower() for r in rows)
        return found

    def folds(self, target: Target) -> dict[str, Fold]:
        """How the sink compares each column of the target (lower case → `keys.Fold`, from
        its collation in the sink's information_schema); cached until the next DDL."""
        found = self._column_folds.get(target)
        if found is not None:
            return found
        rows = self._information_schema(
            target,
            "column collations",
            "SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        )
        found = self._column_folds[target] = {
            str(name).lower(): fold_of(None if collation is None else str(collation))
            for name, collation in rows
        }
        return found

    def target_folds(self, target: Target) -> dict[str, Fold] | None:
        """`folds`, or None when the sink has no such table yet (not cached: it may
        appear)."""
        found = self.folds(target)
        if not found:
            self._column_folds.pop(target, None)
            return None
        return found

    def _information_schema(self, target: Target, what: str, sql: str) -> tuple[Any, ...]:
        """The rows of `sql` (which takes the target's schema and table) on a connection of
        their own, in autocommit: they are looked up while a step's transaction is open on
        the sink's first connection (a target first met in a later chunk), which a read there
        would have to end — committing part of the step — or race with the pipelined write
        of the chunk before (the MySQL sink's `_Pipeline`)."""
        if self._conn is None:
            self._conn = self._connect()
            self._conn.autocommit(True)
        with db_errors(f"reading the {what} of {target}"), self._conn.cursor() as cur:
            cur.execute(sql, (target.schema, target.table))
            return tuple(cur.fetchall())
