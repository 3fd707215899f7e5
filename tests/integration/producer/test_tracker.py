"""The reader's shadow schema against a real server: each DDL is run on a source, and the table
as information_schema shows it right then is recorded; the tracker, reading the binlog later
(when the live server is already past every statement), must give each DDL exactly that schema
— columns, types, lengths, nullability, charsets, collations, defaults, keys — and every table
map must agree with it (no "differs from its table map" fallback)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pprint import pformat
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rowbus.config import Settings
from rowbus.producer.assembler import Query
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.reader import derived_server_id
from rowbus.producer.server import SourceServer
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import SchemaTracker
from rowbus.protocol.ddl import normalize
from rowbus.protocol.events import ColumnSchema, TableSchema
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup

CORPUS = [
    "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT '07', b DECIMAL(6,2) DEFAULT 1.5, "
    "c DOUBLE DEFAULT 1e3, d FLOAT DEFAULT 0.1, e VARCHAR(10) DEFAULT 'it''s\\\\x\\nq', "
    "f DATETIME(3) DEFAULT '2020-1-2 3:04:05', g BIT(5) DEFAULT 5, h ENUM('a','b') DEFAULT 'b', "
    "i SET('x','y') DEFAULT 'y,x', j TIMESTAMP(2) NULL DEFAULT CURRENT_TIMESTAMP(2), k TEXT, "
    "l INT NOT NULL, m CHAR(4) DEFAULT 'ab  ', n TIME DEFAULT '-1:2:3', o YEAR DEFAULT 99, "
    "p TINYINT DEFAULT TRUE, q DOUBLE DEFAULT 1e20, r BINARY(3) DEFAULT 'a', "
    "s DATE DEFAULT 20200102, v BIGINT UNSIGNED DEFAULT 18446744073709551615, "
    "w FLOAT DEFAULT 3.14159265, x DOUBLE DEFAULT -0.0, y JSON, "
    "z VARCHAR(3) CHARACTER SET latin1 DEFAULT _utf8mb4'é', aa INT UNIQUE, "
    "bb VARCHAR(5) BINARY, cc INT AUTO_INCREMENT UNIQUE, dd MEDIUMBLOB, "
    "ee VARBINARY(7) DEFAULT x'4142', ff TINYTEXT CHARACTER SET latin1 COLLATE latin1_bin, "
    "gg SMALLINT(3) UNSIGNED DEFAULT 4, hh DECIMAL(10) DEFAULT -3.7, KEY k_ab (a, b), "
    "UNIQUE KEY (l), CONSTRAINT ck CHECK (a > -100)) DEFAULT CHARSET=utf8mb4",
    "ALTER TABLE t ADD COLUMN n10 VARCHAR(6) DEFAULT ' éZéca'",
    "ALTER TABLE t MODIFY n10 VARCHAR(12)",
    "INSERT INTO t (id, l) VALUES (1, 1)",
    "ALTER TABLE t ALTER COLUMN n10 SET DEFAULT 'later', ALTER COLUMN a DROP DEFAULT",
    "ALTER TABLE t CHANGE b b2 DECIMAL(8,3) NOT NULL DEFAULT 2 AFTER id, DROP COLUMN c",
    "ALTER TABLE t RENAME COLUMN d TO d2, RENAME INDEX k_ab TO k_ab2",
    "ALTER TABLE t ADD (p1 INT NOT NULL DEFAULT 1, p2 CHAR(2) CHARACTER SET ascii DEFAULT 'zz')",
    "ALTER TABLE t DROP INDEX l, ADD UNIQUE INDEX u_p (p1, p2)",
    "CREATE INDEX i_m ON t (m(2), n DESC)",
    "DROP INDEX i_m ON t",
    "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, p1)",
    "ALTER TABLE t DEFAULT CHARSET latin1",
    "ALTER TABLE t ADD COLUMN q1 VARCHAR(5) DEFAULT 'q', ADD COLUMN q2 TEXT FIRST",
    "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    "CREATE TABLE t2 LIKE t",
    "ALTER TABLE t2 ADD COLUMN r2 INT NOT NULL DEFAULT 5",
    "RENAME TABLE t2 TO t3",
    "ALTER TABLE t3 RENAME TO t4, ADD COLUMN r3 BIT(3) DEFAULT b'101'",
    "CREATE TABLE u (a INT NOT NULL, b VARCHAR(3) NOT NULL, UNIQUE KEY ub (b, a)) "
    "CHARACTER SET latin1 COLLATE latin1_general_ci",
    "INSERT INTO u (a, b) VALUES (1, 'x')",
    "ALTER TABLE u ADD COLUMN c ENUM('x','y') NOT NULL DEFAULT 'y', MODIFY b VARCHAR(4)",
    "INSERT INTO u (a, b) VALUES (2, 'y')",
    "DROP TABLE t4",
    "CREATE TABLE t4 (k BIGINT PRIMARY KEY, s SET('a','b','c') DEFAULT 'c,a')",
    "TRUNCATE TABLE t4",
    # Members a quote, a comma and a backslash are part of, in latin1 and in utf8mb4.
    "ALTER TABLE u ADD COLUMN e ENUM('it''s','a,b','x\\\\y','é') CHARSET latin1, "
    "ADD COLUMN f SET('q\"q','ü','x\\\\y')",
    # Zero-length columns: CHAR(0) holds '' or NULL; no length at all means 1.
    "ALTER TABLE u ADD COLUMN z0 CHAR(0), ADD COLUMN z1 BINARY(0), ADD COLUMN z2 NCHAR(0), "
    "ADD COLUMN z3 CHAR, ADD COLUMN z4 BINARY",
]


def _shown(table: TableSchema | None) -> Any:
    """What both sides show of a table: column fields and keys (the live server's form)."""
    if table is None:
        return None

    def col(c: ColumnSchema) -> ColumnSchema:
        # The binlog marks YEAR unsigned; information_schema does not say so.
        return replace(c, unsigned=c.unsigned or c.type == "year")

    primary = table.primary_key
    if not primary:
        # The binlog reports the first UNIQUE index whose columns are all NOT NULL as the
        # primary key; information_schema does not.
        nullable = {c.name: c.nullable for c in table.columns}
        primary = next(
            (
                i.columns
                for i in table.indexes
                if i.unique and not any(nullable[c] for c in i.columns)
            ),
            (),
        )
    return (
        table.schema,
        table.table,
        tuple(col(c) for c in table.columns),
        primary,
        tuple(sorted((i.name, i.columns, i.unique) for i in table.indexes)),
    )


def _expected(server: SourceServer, statement: str, db: str) -> dict[str, Any]:
    """Every table of `db` as the live server shows it now (the primary key as the table map
    reports it: the first UNIQUE NOT NULL index when there is no PRIMARY KEY)."""
    out: dict[str, Any] = {}
    for (name,) in server.query_all(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s", (db,)
    ):
        table = server.catalog.table_schema(db, str(name))
        assert table is not None
        out[str(name)] = table
    del statement
    return out


def run_and_track(
    services: Settings, db: str, statements: list[str]
) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """Run `statements` on source 1 (recording the live state after each), then read them from
    the binlog with a fresh tracker: (statement, tracker's after-schema, live after-schema)
    per DDL, and the tracker's warnings."""
    server_settings = services.sources[0]
    setup = ReaderSetup(services, server_settings, "tracker", db, "{source}", "c", "s")
    connection = setup.source_connection()
    live: list[dict[str, Any]] = []
    with SourceServer(connection) as server:
        file, pos = server.master_position()
        with connect(server_settings, db) as conn, conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
                if not sql.startswith("INSERT"):
                    live.append(_expected(server, sql, db))
        statements = [s for s in statements if not s.startswith("INSERT")]
        tracker = SchemaTracker(
            server.catalog.table_extras, server.catalog.charsets, server.catalog.database_collation
        )
        stream = BinlogStream(
            connection,
            derived_server_id(f"tracker-test/{db}"),
            file,
            pos,
            TableFilter(include_schemas=[db]),
            blocking=False,
            tracker=tracker,
        )
        seen: list[tuple[str, Any, Any]] = []
        try:
            for event in stream.events():
                if isinstance(event, Query) and event.ddl is not None:
                    step = len(seen)
                    target = _target(statements[step])
                    want = live[step].get(target) if target else None
                    got = event.ddl.table if event.ddl.known else "unknown"
                    seen.append((event.statement, got, want))
        finally:
            stream.close()
    return seen, []


def _target(statement: str) -> str | None:
    from rowbus.protocol.ddl import parse_ddl

    name = parse_ddl(statement, "x").table
    return name.table if name is not None else None


def _check(seen: list[tuple[str, Any, Any]], statements: list[str]) -> None:
    assert [normalize(s) for s, _, _ in seen] == [normalize(s) for s in statements]
    diffs = [
        (statement[:60], _difference(got, want))
        for statement, got, want in seen
        if got == "unknown" or _shown(got) != _shown(want)
    ]
    if diffs:
        pytest.fail(pformat(diffs, width=100))


def _difference(got: Any, want: Any) -> Any:
    if got == "unknown" or got is None or want is None:
        return {"tracker": got, "server": want}
    a, b = _shown(got), _shown(want)
    out: list[Any] = []
    for ca, cb in zip(a[2], b[2], strict=False):
        fields = {
            f: (getattr(ca, f), getattr(cb, f))
            for f in ca.__slots__
            if getattr(ca, f) != getattr(cb, f)
        }
        if fields:
            out.append((ca.name, fields))
    if len(a[2]) != len(b[2]):
        out.append(("columns", [c.name for c in a[2]], [c.name for c in b[2]]))
    if a[3:] != b[3:]:
        out.append(("keys", a[3:], b[3:]))
    return out


def test_tracker_gives_each_ddl_the_schema_the_server_had(
    services: Settings, make_database: Any, caplog: pytest.LogCaptureFixture
) -> None:
    db = make_database(services.sources[0])
    with caplog.at_level(logging.WARNING, logger="rowbus.producer.tracker"):
        seen, _ = run_and_track(services, db, CORPUS)
    _check(seen, [s for s in CORPUS if not s.startswith("INSERT")])
    assert [r.message for r in caplog.records] == []


COLUMN_TYPES = [
    "INT",
    "INT UNSIGNED",
    "BIGINT",
    "TINYINT",
    "SMALLINT",
    "MEDIUMINT UNSIGNED",
    "DECIMAL(7,3)",
    "DECIMAL(5)",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "DATETIME",
    "DATETIME(6)",
    "TIMESTAMP(3) NULL",
    "TIME(2)",
    "YEAR",
    "BIT(4)",
    "CHAR(3)",
    "VARCHAR(9)",
    "VARCHAR(9) CHARACTER SET latin1",
    "VARCHAR(4) COLLATE utf8mb4_bin",
    "BINARY(4)",
    "VARBINARY(6)",
    "TEXT",
    "ENUM('a','b','c')",
    "SET('a','b','c')",
]
LITERALS = {
    "INT": ["0", "-7", "'12'"],
    "BIGINT": ["9223372036854775807", "-1"],
    "TINYINT": ["127", "TRUE"],
    "SMALLINT": ["-32768"],
    "MEDIUMINT": ["5"],
    "DECIMAL": ["1.5", "-0.125", "'3'"],
    "FLOAT": ["1.25", "2e5", "-0.5"],
    "DOUBLE": ["1e-3", "12345.678", "0"],
    "DATE": ["'2024-02-29'", "'1999-1-2'"],
    "DATETIME": ["'2020-01-02 03:04:05'", "'2020-01-02 03:04:05.123456'"],
    "TIMESTAMP": ["'2020-01-02 03:04:05.5'", "CURRENT_TIMESTAMP(3)"],
    "TIME": ["'-12:00:01.5'", "'838:59:59'"],
    "YEAR": ["2024", "'05'"],
    "BIT": ["b'1010'", "3"],
    "CHAR": ["'ab'", "'x '", "''"],
    "VARCHAR": ["'é q'", "'it''s'", "''"],
    "BINARY": ["'ab'", "x'00ff'"],
    "VARBINARY": ["'abc'", "''"],
    "TEXT": ["'t'"],
    "ENUM": ["'b'", "'C'"],
    "SET": ["'c,a'", "''"],
}


@st.composite
def column_clause(draw: st.DrawFn, name: str) -> str:
    typ = draw(st.sampled_from(COLUMN_TYPES))
    base = typ.split("(")[0].split(" ")[0]
    null = draw(st.sampled_from(["", "NULL", "NOT NULL"]))
    if "NULL" in typ:
        null = ""
    default = ""
    if draw(st.booleans()):
        lit = draw(st.sampled_from(LITERALS[base]))
        if lit == "CURRENT_TIMESTAMP(3)" and "(3)" not in typ:
            lit = "CURRENT_TIMESTAMP"
        default = f"DEFAULT {lit}"
    return f"`{name}` {typ} {null} {default}".strip()


@st.composite
def ddl_sequence(draw: st.DrawFn) -> list[str]:
    """A CREATE TABLE then ADD/MODIFY/CHANGE/ALTER COLUMN/DROP statements valid at each step."""
    cols = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    defs = ", ".join(draw(column_clause(c)) for c in cols)
    charset = draw(st.sampled_from(["utf8mb4", "latin1"]))
    out = [f"CREATE TABLE g (id INT PRIMARY KEY, {defs}) DEFAULT CHARSET={charset}"]
    fresh = iter(range(100))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["add", "modify", "change", "default", "drop", "index"]))
        if op == "add" or not cols:
            name = f"n{next(fresh)}"
            where = draw(st.sampled_from(["", " FIRST", " AFTER id"]))
            out.append(f"ALTER TABLE g ADD COLUMN {draw(column_clause(name))}{where}")
            cols.append(name)
        elif op == "modify":
            name = draw(st.sampled_from(cols))
            out.append(f"ALTER TABLE g MODIFY {draw(column_clause(name))}")
        elif op == "change":
            name = draw(st.sampled_from(cols))
            new = f"r{next(fresh)}"
            out.append(f"ALTER TABLE g CHANGE `{name}` {draw(column_clause(new))}")
            cols[cols.index(name)] = new
        elif op == "default":
            name = draw(st.sampled_from(cols))
            out.append(f"ALTER TABLE g ALTER COLUMN `{name}` DROP DEFAULT")
        elif op == "drop" and len(cols) > 1:
            name = draw(st.sampled_from(cols))
            out.append(f"ALTER TABLE g DROP COLUMN `{name}`")
            cols.remove(name)
        elif op == "index":
            name = draw(st.sampled_from(cols))
            out.append(f"ALTER TABLE g ADD INDEX (`{name}`)")
    return out


@settings(
    max_examples=int(__import__("os").environ.get("TRACKER_EXAMPLES", "15")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    derandomize=not __import__("os").environ.get("TRACKER_RANDOM"),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(statements=ddl_sequence())
def test_generated_column_definitions_match_the_server(
    services: Settings, make_database: Any, statements: list[str]
) -> None:
    scratch, db = make_database(services.sources[0]), make_database(services.sources[0])
    ran: list[str] = []
    with connect(services.sources[0], scratch) as conn, conn.cursor() as cur:
        for sql in statements:
            try:
                cur.execute(sql)
            except Exception:
                break
            ran.append(sql)
    seen, _ = run_and_track(services, db, ran)
    _check(seen, ran)
