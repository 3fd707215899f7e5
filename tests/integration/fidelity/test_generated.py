"""A generated differential test for values: random column types and values are inserted on the
real source, carried by the real reader through Kafka and rebuilt by a `Subscriber`; every
rebuilt row must equal the source row, column for column, types included."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysql.converters import escape_string

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import ReaderCheckpoint, RowChange
from rowbus.protocol.values import TIME_MAX_US, Value, format_time
from tests.conftest import connect
from tests.integration.fidelity.corpus import Case, from_source, same
from tests.integration.fidelity.test_values import _drop_topics, _topics
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def _text(v: str) -> str:
    return "'" + escape_string(v) + "'"


def _hex(v: bytes) -> str:
    return "X'" + v.hex() + "'"


_TYPES: dict[str, st.SearchStrategy[str]] = {
    "INT": st.integers(-(2**31), 2**31 - 1).map(str),
    "BIGINT UNSIGNED": st.integers(0, 2**64 - 1).map(str),
    "DECIMAL(30,10)": st.decimals(
        min_value=Decimal(-(10**20)) + 1, max_value=Decimal(10**20) - 1, places=10
    ).map(lambda d: format(d, "f")),
    "DOUBLE": st.floats(allow_nan=False, allow_infinity=False).map(repr),
    "FLOAT": st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    "VARCHAR(12) CHARSET utf8mb4": st.text(
        st.characters(blacklist_categories=("Cs",)), max_size=12
    ).map(_text),
    "VARCHAR(12) CHARSET latin1": st.binary(max_size=12).map(_hex),
    "CHAR(6) CHARSET latin1": st.binary(max_size=6).map(_hex),
    "VARBINARY(12)": st.binary(max_size=12).map(_hex),
    "BINARY(4)": st.binary(max_size=4).map(_hex),
    "BLOB": st.binary(max_size=40).map(_hex),
    "TIME(6)": st.integers(-TIME_MAX_US, TIME_MAX_US).map(
        lambda us: _text(format_time(dt.timedelta(microseconds=us)))
    ),
    "TIME(2)": st.integers(-TIME_MAX_US // 10_000, TIME_MAX_US // 10_000).map(
        lambda cs: _text(format_time(dt.timedelta(microseconds=cs * 10_000)))
    ),
    "DATETIME(6)": st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31)).map(
        lambda d: _text(d.isoformat(" "))
    )
    | st.sampled_from(["'0000-00-00 00:00:00'", "'2020-00-10 01:02:03.4'"]),
    "DATE": st.dates(dt.date(1000, 1, 1)).map(lambda d: _text(d.isoformat()))
    | st.sampled_from(["'0000-00-00'", "'2021-02-00'"]),
    "TIMESTAMP(3) NULL": st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18)).map(
        lambda d: _text(d.isoformat(" "))
    )
    | st.just("'0000-00-00 00:00:00'"),
    "YEAR": st.sampled_from(["0", "1901", "2155"]) | st.integers(1901, 2155).map(str),
    "SET('a','b','c')": st.sets(st.sampled_from("abc")).map(lambda s: _text(",".join(s))),
    "BIT(10)": st.integers(0, 1023).map(lambda n: f"b'{n:b}'"),
    "ENUM('x','y','')": st.sampled_from(["'x'", "'y'", "''"]),
}
_COLUMN = st.sampled_from(sorted(_TYPES))


@dataclass
class Live:
    setup: ReaderSetup
    sub: Subscriber
    rows: dict[str, dict[int, tuple[Value, ...]]]

    def rebuilt(self, table: str, count: int, timeout: float = 60) -> dict[int, tuple[Value, ...]]:
        deadline = time.monotonic() + timeout

        def apply(txn: Any) -> None:
            for e in txn.events:
                if isinstance(e, RowChange) and e.after is not None:
                    self.rows.setdefault(e.table, {})[int(e.after[0])] = e.after  # type: ignore[arg-type]

        self.sub.run(
            apply,
            should_stop=lambda: (
                len(self.rows.get(table, {})) >= count or time.monotonic() > deadline
            ),
        )
        return self.rows.get(table, {})


@pytest.fixture(scope="module")
def live(services: Settings) -> Iterator[Live]:
    tag = uuid.uuid4().hex[:8]
    data, ckpt, schemas = f"test.gen.{tag}", f"test.genckpt.{tag}", f"test.genschemas.{tag}"
    compact = {"cleanup.policy": "compact", "retention.ms": "-1", "partitions": "1"}
    _topics(
        services,
        {data: {"retention.ms": "-1", "partitions": "2"}, ckpt: dict(compact), schemas: compact},
    )
    server = services.sources[1]
    database = f"gen_{tag}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    setup = ReaderSetup(services, server, data, database, "{source}", ckpt, schemas)
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3):
            index = TopicReader(services, ckpt)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs), 60, "a checkpoint"
            )
            index.close()
            with Subscriber(
                services.kafka.client_config(),
                [data],
                checkpoints_topic=ckpt,
                schemas_topic=schemas,
                group_id=f"gen-{tag}",
            ) as sub:
                yield Live(setup, sub, {})
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        _drop_topics(services, [data, ckpt, schemas])


@st.composite
def tables(draw: Any) -> tuple[list[str], list[list[str]]]:
    types = draw(st.lists(_COLUMN, min_size=1, max_size=6))
    rows = draw(
        st.lists(
            st.tuples(*[st.none() | _TYPES[t] for t in types]).map(
                lambda r: ["NULL" if v is None else v for v in r]
            ),
            min_size=1,
            max_size=3,
        )
    )
    return types, rows


@settings(
    derandomize=True,  # the same examples on every CI run
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=tables())
def test_random_columns_and_values_rebuild_equal_to_the_source(
    live: Live, table: tuple[list[str], list[list[str]]]
) -> None:
    types, rows = table
    name = f"g_{uuid.uuid4().hex[:10]}"
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(types))
    selects = ", ".join(
        f"CAST(c{i} AS DOUBLE)" if t.startswith("FLOAT") else f"c{i}" for i, t in enumerate(types)
    )
    with connect(live.setup.server, live.setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, {columns})")
        values = ", ".join(f"({k}, {', '.join(r)})" for k, r in enumerate(rows))
        cur.execute(f"INSERT INTO `{name}` VALUES {values}")
        cur.execute(f"SELECT id, {selects} FROM `{name}` ORDER BY id")
        source = list(cur.fetchall())
    rebuilt = live.rebuilt(name, len(source))
    assert sorted(rebuilt) == [r[0] for r in source]
    for row in source:
        got = rebuilt[row[0]]
        for i, t in enumerate(types):
            case = Case(f"c{i}", t, ())
            want = from_source(case, row[i + 1])
            assert same(case, got[i + 1], want), (t, rows, want, got[i + 1])
