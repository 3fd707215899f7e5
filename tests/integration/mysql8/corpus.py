"""The fidelity corpus (`tests.integration.fidelity.corpus`) as a MySQL 8.4 binlog.

The values come from the real MariaDB source: each case's literals are inserted there (lenient
sql_mode, UTC) and read back with pymysql, so the MySQL 8 rows hold exactly the values the
MariaDB path is compared with (`from_source`, `same`: the fidelity tests hold the MariaDB path
equal to them). The binlog then holds, per case, the CREATE TABLE, the inserts in one
transaction, and the fidelity test's changes (the NULL row takes row 1's value, row 1 goes,
a NULL row -1 comes) in another, every third one under a tagged GTID.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from rowbus.config import MySQLSettings
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES, Case, select
from tests.mysql8.binlog import Binlog, Change, Table, Transaction
from tests.mysql8.rows import column

SKIPPED = {"uuid", "inet6", "inet4", "enum_quotes", "utf8mb4_bin"}
"""MariaDB-only types, and cases whose definition the MySQL 8 forms here do not parse."""
OTHER_CHARSETS = ("latin", "ascii", "utf8mb3", "ucs2", "utf16", "utf32", "gb", "big5", "sjis")
OTHER_CHARSETS += ("cp", "ujis", "euckr", "koi8r", "greek", "hebrew", "tis620")


def mysql8_cases() -> list[Case]:
    """The corpus's cases in utf8mb4 or binary, of types MySQL 8.4 has."""
    return [
        c
        for c in CASES
        if c.name not in SKIPPED
        and not any(c.name.startswith(p) for p in OTHER_CHARSETS)
        and ("CHARSET" not in c.type or "CHARSET utf8mb4" in c.type)
    ]


@dataclass
class Corpus:
    database: str
    cases: list[Case]
    final: dict[str, list[tuple[Any, ...]]]
    """Per case table: the rows after every change, as pymysql read them from MariaDB."""
    changes: int
    """Row changes in the binlog (each a record)."""


def values_from_mariadb(server: MySQLSettings, cases: list[Case]) -> dict[str, dict[int, Any]]:
    """Each case's values (id -> value) as the real source stores and pymysql reads them."""
    database = f"m8_{uuid.uuid4().hex[:8]}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    try:
        with connect(server, database) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET time_zone = '+00:00'")
            out = {}
            for case in cases:
                cur.execute(case.create())
                for statement in case.inserts():
                    cur.execute(statement)
                cur.execute(select(case))
                out[case.table] = {int(r[0]): r[1] for r in cur.fetchall()}
            return out
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def build(binlog: Binlog, database: str, values: dict[str, dict[int, Any]]) -> Corpus:
    cases = mysql8_cases()
    final: dict[str, list[tuple[Any, ...]]] = {}
    changes = 0
    binlog.add([Transaction(ddl=f"CREATE DATABASE `{database}`")])
    for n, case in enumerate(cases):
        table = Table(
            database,
            case.table,
            [column("id", "INT", primary=True), column("v", case.type)],
            table_id=100 + n,
            partition=0 if n % 2 else None,  # half the tables' rows carry the 8.0 extra data
        )
        rows = values[case.table]
        inserts = [Change(table, None, (i, v)) for i, v in sorted(rows.items())]
        first = rows.get(1)
        later = [
            Change(table, (0, None), (0, first)),
            Change(table, (1, first), None),
            Change(table, None, (-1, None)),
        ]
        binlog.add(
            [
                Transaction(ddl=case.create(), schema=database),
                Transaction(inserts),
                # Every third case's changes run tagged (gtid_next='AUTOMATIC:fix', 8.3+).
                Transaction(later, tag="fix" if n % 3 == 0 else ""),
            ]
        )
        changes += len(inserts) + len(later)
        state = dict(rows)
        state[0] = first
        del state[1]
        state[-1] = None
        final[case.table] = sorted(state.items())
    return Corpus(database, cases, final, changes)
