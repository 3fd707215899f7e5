"""Values the source holds but a STRICT sink refuses: the ENUM error value.

A source with a lenient ``sql_mode`` stores a non-member written to an ENUM column as the error
value (index 0, read as ``''``); the protocol carries it as ``""`` (PROTOCOL.md §2.1). The sink
runs STRICT, so the upsert of such a row fails with "Data truncated". `upsert` then writes the
rows of that statement one by one, and a row that fails so is written again under a lenient
``sql_mode`` for that one statement (MariaDB's ``SET STATEMENT … FOR``) — and kept only if
every warning it raised is that truncation, on an ENUM column, for a value that is ``""`` in
the row: anything else (a sink column narrower than the source's, an ENUM whose members
drifted) still fails, as STRICT would.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pymysql

from rowbus.protocol.values import Value
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import upsert_statements

ER_DATA_TRUNCATED = 1265
LENIENT = "SET STATEMENT sql_mode = 'NO_AUTO_VALUE_ON_ZERO' FOR "
_TRUNCATED = re.compile(r"Data truncated for column '(.+)' at row \d+")


def _code(exc: BaseException) -> int:
    return int(exc.args[0]) if exc.args and isinstance(exc.args[0], int) else 0


def upsert(
    cur: Any,
    target: Target,
    columns: Sequence[str],
    key_columns: Sequence[str],
    rows: Sequence[Sequence[Value]],
    max_bytes: int,
) -> None:
    """The upserts of `rows` (literals, as collapse leaves them), with the ENUM error value
    written as the source has it."""
    for sql in upsert_statements(target, columns, key_columns, rows, max_bytes, rendered=True):
        try:
            cur.execute(sql)
        except pymysql.err.MySQLError as exc:
            if _code(exc) != ER_DATA_TRUNCATED:
                raise
            break  # some row holds a value STRICT refuses: row by row (upserts are idempotent)
    else:
        return
    for row in rows:
        for sql in upsert_statements(target, columns, key_columns, [row], max_bytes, rendered=True):
            try:
                cur.execute(sql)
            except pymysql.err.MySQLError as exc:
                if _code(exc) != ER_DATA_TRUNCATED:
                    raise
                _enum_error_row(cur, target, columns, row, sql, exc)


def _enum_error_row(
    cur: Any,
    target: Target,
    columns: Sequence[str],
    row: Sequence[Value],
    sql: str,
    refused: pymysql.err.MySQLError,
) -> None:
    # The ENUM error value is the empty string ('' once rendered).
    empty = [c for c, v in zip(columns, row, strict=True) if v == "''"]
    if not empty:
        raise refused
    cur.execute(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND DATA_TYPE = 'enum'",
        (target.schema, target.table),
    )
    enums = {str(r[0]).lower() for r in cur.fetchall()}
    allowed = {c.lower() for c in empty} & enums
    cur.execute("SAVEPOINT rowbus_enum_error")
    cur.execute(LENIENT + sql)
    cur.execute("SHOW WARNINGS")
    for _level, code, message in cur.fetchall():
        found = _TRUNCATED.fullmatch(str(message))
        if int(code) != ER_DATA_TRUNCATED or not found or found.group(1).lower() not in allowed:
            # Not (only) the ENUM error value: undo it and refuse as STRICT did.
            cur.execute("ROLLBACK TO SAVEPOINT rowbus_enum_error")
            raise refused
    cur.execute("RELEASE SAVEPOINT rowbus_enum_error")
