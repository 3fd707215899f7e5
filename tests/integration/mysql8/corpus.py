"""The fidelity corpus (`tests.integration.fidelity.corpus`) as a MySQL 8.4 binlog.

The values come from the real MariaDB source: each case's literals are inserted there (lenient
sql_mode, UTC) and read back with pymysql, so the MySQL 8 rows hold exactly the values the
MariaDB path is compared with (`from_source`, `same`: the fidelity tests hold the MariaDB path
equal to them). A character column's row images hold the bytes MariaDB stores for it, in its
own charset (MySQL 8.4 stores the same bytes for each of the corpus's charsets), and its table
map names the charset by MySQL 8.4's collation id. The binlog then holds, per case, the CREATE TABLE, the inserts in one
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
from tests.mysql8.rows import BINARY, column

SKIPPED = {
    "uuid": "UUID is MariaDB's (10.7+); MySQL 8.4 has no such column type",
    "inet6": "INET6 is MariaDB's (10.5+); MySQL 8.4 has no such column type",
    "inet4": "INET4 is MariaDB's (10.10+); MySQL 8.4 has no such column type",
}
"""Cases whose type MySQL 8.4 lacks, with the reason. Every other case, in every character
set the corpus uses (MySQL 8.4 has them all, under the same default collation ids), runs."""


def mysql8_cases() -> list[Case]:
    """The corpus's cases of types MySQL 8.4 has."""
    return [c for c in CASES if c.name not in SKIPPED]


MIXED = {
    "f_mixed_columns": (
        "latin1",
        "gbk",
        "ucs2",
        "text",
        "utf8mb4_bin",
        "enum_latin1",
        "enum_gbk",
        "set",
    ),
    "f_mixed_default": (
        "latin1",
        "latin1_char",
        "latin1_text",
        "gbk",
        "enum_latin1",
        "set_latin1",
        "enum",
    ),
}
"""Tables of several cases' columns side by side (`c_<case>`), so that the table maps carry
both of MySQL's forms of the charsets: f_mixed_columns's character columns (5 collations) and
ENUM/SET columns (3) are each listed column by column (COLUMN_CHARSET, ENUM_AND_SET_COLUMN_
CHARSET); f_mixed_default's have a most used collation (latin1) with the others listed
after it (DEFAULT_CHARSET, ENUM_AND_SET_DEFAULT_CHARSET)."""


@dataclass
class Mixed:
    cases: list[Case]
    rows: dict[int, tuple[Any, ...]]
    """id -> the columns' values as pymysql read them from MariaDB (None where a case has no
    row of that id)."""


@dataclass
class Corpus:
    database: str
    cases: list[Case]
    final: dict[str, list[tuple[Any, ...]]]
    """Per case table: the rows after every change, as pymysql read them from MariaDB."""
    changes: int
    """Row changes in the binlog (each a record)."""
    mixed: dict[str, Mixed]
    """The `MIXED` tables, inserted once."""


@dataclass
class Values:
    """One case's rows (id -> value) from the real source: as pymysql reads them (what the
    MariaDB path is compared with) and as the source stores them (what a row image holds)."""

    read: dict[int, Any]
    stored: dict[int, Any]


def _stored_select(case: Case) -> str | None:
    """For a character column (not ENUM/SET, whose images hold numbers), the SELECT of its
    stored bytes: MariaDB and MySQL store the same bytes for the same charset (MySQL's latin1
    is cp1252 as MariaDB's; its utf8mb3 is MariaDB's), which pymysql would otherwise convert
    to the connection's utf8mb4 on the way. CHAR's trailing pad is dropped on reading as in
    a row image (both servers' Field_string::pack)."""
    col = column("v", case.type)
    if col.collation in (None, BINARY) or col.members:
        return None
    return f"SELECT id, CAST(v AS BINARY) FROM `{case.table}` ORDER BY id"


def values_from_mariadb(server: MySQLSettings, cases: list[Case]) -> dict[str, Values]:
    """Each case's values as the real source stores and pymysql reads them."""
    database = f"m8_{uuid.uuid4().hex[:8]}"
    with connect(server) as conn, conn.cursor() as cur:
        # utf8mb4 as MySQL 8.4's default, for the columns that name no charset.
        cur.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4")
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
                read = {int(r[0]): r[1] for r in cur.fetchall()}
                stored = dict(read)
                raw = _stored_select(case)
                if raw is not None:
                    cur.execute(raw)
                    stored = {int(r[0]): r[1] for r in cur.fetchall()}
                out[case.table] = Values(read, stored)
            return out
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


def build(binlog: Binlog, database: str, values: dict[str, Values]) -> Corpus:
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
        rows = values[case.table].read
        stored = values[case.table].stored
        inserts = [Change(table, None, (i, v)) for i, v in sorted(stored.items())]
        first = rows.get(1)
        later = [
            Change(table, (0, None), (0, stored.get(1))),
            Change(table, (1, stored.get(1)), None),
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
    mixed = {}
    for n, (name, names) in enumerate(MIXED.items()):
        mixed[name] = _mixed(binlog, database, name, names, values, 100 + len(cases) + n)
        changes += len(mixed[name].rows)
    return Corpus(database, cases, final, changes, mixed)


def _mixed(
    binlog: Binlog,
    database: str,
    name: str,
    names: tuple[str, ...],
    values: dict[str, Values],
    table_id: int,
) -> Mixed:
    """One `MIXED` table: its CREATE, then one insert transaction of a row per id any of its
    cases has, each column holding its case's value of that id."""
    cases = [c for c in CASES if c.name in names]
    columns = [column(f"c_{c.name}", c.type) for c in cases]
    table = Table(database, name, [column("id", "INT", primary=True), *columns], table_id=table_id)
    ids = sorted({i for c in cases for i in values[c.table].stored})
    inserts = [
        Change(table, None, (i, *(values[c.table].stored.get(i) for c in cases))) for i in ids
    ]
    create = ", ".join(f"c_{c.name} {c.type}" for c in cases)
    binlog.add(
        [
            Transaction(
                ddl=f"CREATE TABLE `{name}` (id INT PRIMARY KEY, {create})", schema=database
            ),
            Transaction(inserts),
        ]
    )
    rows = {i: tuple(values[c.table].read.get(i) for c in cases) for i in ids}
    return Mixed(cases, rows)
