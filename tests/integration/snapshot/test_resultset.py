"""The snapshot's bulk result-set reader (`producer.snapshot.resultset`, native) returns exactly
what pymysql's own row-by-row reading returns on the same connection: the whole type matrix,
generated values of every kind of column, rows split over several protocol packets, an error
in the middle of a result, and the connection usable afterwards."""

from __future__ import annotations

import decimal
from collections.abc import Callable
from typing import Any

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.config import Settings
from rowbus.producer.server import SourceServer
from rowbus.producer.snapshot import resultset
from rowbus.producer.snapshot.values import CONVERSIONS, post_converters, select_expression
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES

GENERATED = (
    "CREATE TABLE g (id INT PRIMARY KEY, i BIGINT, u BIGINT UNSIGNED, d DECIMAL(30,10), "
    "f DOUBLE, fl FLOAT, s VARCHAR(100) CHARACTER SET utf8mb4, l VARCHAR(100) CHARACTER SET "
    "latin1, b VARBINARY(100), t DATETIME(6), dt DATE, tm TIME(3), y YEAR, bt BIT(13), "
    "e ENUM('a','é','x y'), st SET('a','b','ç'), j JSON, ts TIMESTAMP(3) NULL, d2 DATETIME(2))"
)


def _pair(source: SourceConnection, sql: str, post: list[Any]) -> tuple[list[Any], list[Any]]:
    """The rows of `sql` read natively and by pymysql, on one connection each."""
    native = mysql.connect(source, autocommit=False, conv=CONVERSIONS)
    plain = mysql.connect(source, autocommit=False, conv=CONVERSIONS)
    try:
        got = resultset.select(native, sql, [], post)
        # The connection is left in step: a further query on it answers.
        assert resultset.select(native, "SELECT 7", [], [None]) == [(7,)]
        saved = resultset._resultset
        resultset._resultset = None
        try:
            want = resultset.select(plain, sql, [], post)
        finally:
            resultset._resultset = saved
    finally:
        native.close()
        plain.close()
    return got, want


@pytest.fixture
def database(services: Settings, make_database: Callable[..., str]) -> str:
    return make_database(services.sources[0])  # type: ignore[no-any-return]


def _source(services: Settings) -> SourceConnection:
    server = services.sources[0]
    return SourceConnection(
        name="resultset",
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password.get_secret_value(),
    )


def test_the_native_reader_is_built() -> None:
    assert resultset.AVAILABLE, "producer/snapshot/_resultset.c did not build"


def test_every_type_of_the_matrix_reads_as_pymysql_reads_it(
    services: Settings, database: str
) -> None:
    with connect(services.sources[0], database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        for case in CASES:
            cur.execute(case.create())
            for statement in case.inserts():
                cur.execute(statement)
    source = _source(services)
    with SourceServer(source) as server:
        schemas = {c.table: server.catalog.table_schema(database, c.table) for c in CASES}
    wrong = []
    for case in CASES:
        schema = schemas[case.table]
        assert schema is not None
        cols = ", ".join(select_expression(c) for c in schema.columns)
        got, want = _pair(
            source,
            f"SELECT {cols} FROM `{database}`.`{case.table}` ORDER BY id",
            post_converters(schema.columns),
        )
        if [tuple(map(type, r)) for r in got] != [tuple(map(type, r)) for r in want] or got != want:
            wrong.append(f"{case.name}: native {got!r}, pymysql {want!r}")
    assert not wrong, "\n".join(wrong)


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFFF), max_size=30
)
_ROW = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**64 - 1),
    st.decimals(
        min_value=decimal.Decimal("-99999999999999999999.9999999999"),
        max_value=decimal.Decimal("99999999999999999999.9999999999"),
        places=10,
        allow_nan=False,
        allow_infinity=False,
    ),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    _TEXT,
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=30),
    st.binary(max_size=40),
    st.sampled_from(["2024-02-29 23:59:59.999999", "0000-00-00 00:00:00", "1000-01-01 00:00:00"]),
    st.sampled_from(["2024-02-29", "0000-00-00", "9999-12-31", "2024-02-30"]),
    st.sampled_from(["-838:59:59.000", "838:59:59.999", "00:00:00", "-00:00:01.5"]),
    st.integers(1901, 2155),
    st.integers(0, 2**13 - 1),
    st.sampled_from(["a", "é", "x y", ""]),
    st.sets(st.sampled_from(["a", "b", "ç"])).map(lambda s: ",".join(sorted(s))),
    st.sampled_from(['{"a": [1, 2.5, "é"]}', "null", "[]", '"x"']),
    st.sampled_from(["2024-02-29 23:59:59.999", "1970-01-01 00:00:01", "0000-00-00 00:00:00"]),
    st.sampled_from(["2024-02-30 10:00:00.5", "9999-12-31 23:59:59.99", "2024-00-10 00:00:00"]),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(st.one_of(_ROW, st.none()), min_size=1, max_size=30))
def test_generated_values_read_as_pymysql_reads_them(
    services: Settings, database: str, rows: list[tuple[Any, ...] | None]
) -> None:
    with connect(services.sources[0], database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")  # 02-30 kept as it is
        cur.execute("DROP TABLE IF EXISTS g")
        cur.execute(GENERATED)
        for i, row in enumerate(rows):
            values = row if row is not None else (None,) * 18  # None: a row of NULLs
            cur.execute(f"INSERT INTO g VALUES (%s{', %s' * 18})", (i, *values))
    source = _source(services)
    with SourceServer(source) as server:
        schema = server.catalog.table_schema(database, "g")
    assert schema is not None
    cols = ", ".join(select_expression(c) for c in schema.columns)
    got, want = _pair(
        source, f"SELECT {cols} FROM `{database}`.g ORDER BY id", post_converters(schema.columns)
    )
    assert [tuple(map(type, r)) for r in got] == [tuple(map(type, r)) for r in want]
    assert got == want


def test_rows_over_several_packets_and_many_rows(services: Settings, database: str) -> None:
    source = _source(services)
    # 2^24-1 bytes make a packet continued by an empty one; 20M bytes span two.
    sql = (
        "SELECT REPEAT('a', 20000000), 7, NULL UNION ALL SELECT REPEAT('b', 16777211), 8, 'x' "
        "UNION ALL SELECT '', 9, REPEAT('c', 16777215)"
    )
    got, want = _pair(source, sql, [None, None, None])
    assert got == want
    assert [len(r[0]) for r in got] == [20_000_000, 16_777_211, 0]
    got, want = _pair(
        source, f"SELECT seq, CONCAT('r', seq) FROM `{database}`.seq_1_to_100000", [None, None]
    )
    assert got == want and len(got) == 100_000


def test_an_error_in_the_middle_of_a_result_is_raised_and_the_connection_stays_usable(
    services: Settings, database: str
) -> None:
    source = _source(services)
    conn = mysql.connect(source, autocommit=False, conv=CONVERSIONS)
    # The scalar subquery is evaluated, and fails, only from row 5000: after rows were sent.
    sql = (
        f"SELECT seq, IF(seq < 5000, seq, (SELECT seq FROM `{database}`.seq_1_to_2)) "
        f"FROM `{database}`.seq_1_to_10000"
    )
    try:
        with pytest.raises(pymysql.MySQLError) as raised:
            resultset.select(conn, sql, [], [None, None])
        assert raised.value.args[0] == 1242  # Subquery returns more than 1 row
        assert resultset.select(conn, "SELECT 'still', 1", [], [None, None]) == [("still", 1)]
    finally:
        conn.close()


def test_a_value_that_fails_to_convert_raises_its_own_error_and_closes_the_connection(
    services: Settings, database: str
) -> None:
    def fussy(v: object) -> object:
        if v == 50_000:
            raise ValueError("not this one")
        return v

    conn = mysql.connect(_source(services), autocommit=False, conv=CONVERSIONS)
    try:
        with pytest.raises(ValueError, match="not this one"):
            resultset.select(conn, f"SELECT seq FROM `{database}`.seq_1_to_100000", [], [fussy])
        assert not conn.open  # the rest of the result is unread: never used again
    finally:
        if conn.open:
            conn.close()


@pytest.mark.parametrize("native", [True, False], ids=["native", "pymysql"])
def test_a_streamed_result_comes_in_lists_cut_at_the_size_the_last_one_marked(
    services: Settings, database: str, native: bool
) -> None:
    """`stream` (a keyless table's chunks): lists of exactly n rows but the last, the last one
    known without reading ahead; closed early, the connection is closed (its unread rest is
    never read), and a connection that read to the end answers further queries."""
    source = _source(services)
    conn = mysql.connect(source, autocommit=False, conv=CONVERSIONS)
    saved = resultset._resultset
    if not native:
        resultset._resultset = None
    try:
        for total, sizes in [(25_000, [10_000, 10_000, 5_000]), (20_000, [10_000, 10_000])]:
            sql = f"SELECT seq, CONCAT('r', seq) FROM `{database}`.seq_1_to_{total}"
            parts = list(resultset.stream(conn, sql, [], [None, None], 10_000))
            assert [(len(rows), last) for rows, last in parts] == [
                (n, i == len(sizes) - 1) for i, n in enumerate(sizes)
            ]
            assert [r[0] for rows, _ in parts for r in rows] == list(range(1, total + 1))
        empty = f"SELECT seq FROM `{database}`.seq_1_to_10 WHERE seq > 10"
        assert list(resultset.stream(conn, empty, [], [None], 3)) == [([], True)]
        assert resultset.select(conn, "SELECT 7", [], [None]) == [(7,)]
        scan = resultset.stream(
            conn, f"SELECT seq FROM `{database}`.seq_1_to_1000000", [], [None], 1_000
        )
        rows, last = next(scan)
        assert len(rows) == 1_000 and not last
        scan.close()
        assert not conn.open, "a connection with an unread result left open"
    finally:
        resultset._resultset = saved
        if conn.open:
            conn.close()
