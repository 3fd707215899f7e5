"""Generated differential test: random table schemas and random DDL/DML sequences run on a real
source; the table a `Subscriber` rebuilds from the protocol alone and the table the Spark apply
job writes to the sink must both equal the source's, rows and schema (types included). One
reader, one Subscriber and one Spark apply query serve every example (each example has its own
table), so an example costs only its own statements' trip through the pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.ddl import TableName
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.schema_changes.rebuild import Rebuild
from tests.integration.schema_changes.test_matrix import compare, source_tables

TYPES = ["INT", "BIGINT", "VARCHAR(6)", "DECIMAL(8,2)"]


@dataclass
class Pipeline:
    server: Any
    sink: Any
    db: str
    sub: Subscriber
    query: Any
    rebuilt: Rebuild = field(default_factory=Rebuild)
    count: int = 0

    def drain(self) -> None:
        for txn in self.sub.poll(0.2):
            for ev in txn.events:
                if isinstance(ev, RowChange):
                    self.rebuilt.apply(ev, self.sub.table(ev))
                elif isinstance(ev, DdlChange):
                    self.rebuilt.apply(ev, None)


@pytest.fixture(scope="module")
def pipeline(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    tag = uuid.uuid4().hex[:8]
    server = services.sources[1]
    db = f"diff_{tag}"
    source, checkpoints, schemas = f"diff-src-{tag}", f"diff-ckpt-{tag}", f"diff-schemas-{tag}"
    admin = AdminClient(services.kafka.client_config())
    futures = admin.create_topics(
        [
            NewTopic(source, 2, 1, config={"retention.ms": "-1"}),
            NewTopic(checkpoints, 1, 1, config={"cleanup.policy": "compact"}),
            NewTopic(schemas, 1, 1, config={"cleanup.policy": "compact"}),
        ]
    )
    for f in futures.values():
        f.result(30)
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
    setup = ReaderSetup(
        services=services,
        server=server,
        source=source,
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
    )
    try:
        with ExitStack() as stack:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
            index = TopicReader(services, checkpoints)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
                timeout=60,
                what="the reader's first checkpoint",
            )
            index.close()
            sub = stack.enter_context(
                Subscriber(
                    services.kafka.client_config(),
                    [source],
                    checkpoints_topic=checkpoints,
                    schemas_topic=schemas,
                    group_id=f"diff-{tag}",
                    topic_template="{source}",
                )
            )
            # (a) the Spark apply job: every table of the source database, to the same name.
            config = job_config(
                services,
                f"diff_{tag}",
                [source],
                schemas,
                [],
                tmp_path_factory.mktemp("diff-cp"),
                unrouted="identity",
            )
            applier = BatchApplier(config).start()
            stack.callback(applier.close)
            query = start_query(shared_spark(), config, applier)
            stack.callback(query.stop)
            yield Pipeline(server, services.resolved_sink, db, sub, query)
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in (db, f"state_diff_{tag}"):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.delete_topics([source, checkpoints, schemas])


def value_of(st_type: str) -> st.SearchStrategy[Any]:
    if st_type == "INT":
        return st.integers(-(2**31), 2**31 - 1)
    if st_type == "BIGINT":
        return st.integers(-(2**63), 2**63 - 1)
    if st_type.startswith("VARCHAR"):
        return st.text("abcXYZ é'\\", max_size=6)
    return st.decimals(-999999, 999999, places=2, allow_nan=False, allow_infinity=False)


def literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "''") + "'"
    return str(v)


@st.composite
def scenario(draw: st.DrawFn) -> list[str]:
    """CREATE TABLE {t} …, then DDL and DML valid for the table as it is at each step."""
    cols: dict[str, str] = {}
    for i in range(draw(st.integers(1, 3))):
        cols[f"c{i}"] = draw(st.sampled_from(TYPES))
    defs = ", ".join(f"`{n}` {t}" for n, t in cols.items())
    out = [f"CREATE TABLE {{t}} (id INT PRIMARY KEY, {defs}) DEFAULT CHARSET=utf8mb4"]
    ids: set[int] = set()
    indexes: dict[str, str] = {}  # column -> index name
    fresh = iter(range(10, 10_000))
    for _ in range(draw(st.integers(1, 12))):
        op = draw(
            st.sampled_from(
                [
                    "insert",
                    "insert",
                    "update",
                    "delete",
                    "add",
                    "drop",
                    "modify",
                    "rename",
                    "index",
                    "unindex",
                    "truncate",
                ]
            )
        )
        if op == "insert" or (op in ("update", "delete") and not ids):
            rid = draw(st.integers(1, 30).filter(lambda x: x not in ids))
            values = [literal(draw(value_of(t))) for t in cols.values()]
            out.append(f"INSERT INTO {{t}} VALUES ({', '.join([str(rid), *values])})")
            ids.add(rid)
        elif op == "update" and cols:
            rid = draw(st.sampled_from(sorted(ids)))
            name, typ = draw(st.sampled_from(sorted(cols.items())))
            out.append(
                f"UPDATE {{t}} SET `{name}` = {literal(draw(value_of(typ)))} WHERE id = {rid}"
            )
        elif op == "delete":
            rid = draw(st.sampled_from(sorted(ids)))
            out.append(f"DELETE FROM {{t}} WHERE id = {rid}")
            ids.discard(rid)
        elif op == "add":
            name, typ = f"n{next(fresh)}", draw(st.sampled_from(TYPES))
            default = literal(draw(value_of(typ)))
            null = draw(
                st.sampled_from(["NULL", f"NOT NULL DEFAULT {default}", f"DEFAULT {default}"])
            )
            out.append(f"ALTER TABLE {{t}} ADD COLUMN `{name}` {typ} {null}")
            cols[name] = typ
        elif op == "drop" and len(cols) > 1:
            name = draw(st.sampled_from(sorted(cols)))
            out.append(f"ALTER TABLE {{t}} DROP COLUMN `{name}`")
            del cols[name]
            indexes.pop(name, None)
        elif op == "modify" and cols:
            name = draw(st.sampled_from(sorted(cols)))
            wider = {
                "INT": "BIGINT",
                "BIGINT": "BIGINT",
                "VARCHAR(6)": "VARCHAR(12)",
                "VARCHAR(12)": "VARCHAR(20)",
                "DECIMAL(8,2)": "DECIMAL(12,3)",
                "DECIMAL(12,3)": "DECIMAL(12,3)",
                "VARCHAR(20)": "VARCHAR(20)",
            }[cols[name]]
            out.append(f"ALTER TABLE {{t}} MODIFY `{name}` {wider}")
            cols[name] = wider
        elif op == "rename" and cols:
            name = draw(st.sampled_from(sorted(cols)))
            new = f"r{next(fresh)}"
            out.append(f"ALTER TABLE {{t}} RENAME COLUMN `{name}` TO `{new}`")
            cols = {new if k == name else k: v for k, v in cols.items()}  # keeps the position
            if name in indexes:
                indexes[new] = indexes.pop(name)
        elif op == "index" and set(cols) - set(indexes):
            name = draw(st.sampled_from(sorted(set(cols) - set(indexes))))
            out.append(f"CREATE INDEX `i_{name}` ON {{t}} (`{name}`)")
            indexes[name] = f"i_{name}"
        elif op == "unindex" and indexes:
            name = draw(st.sampled_from(sorted(indexes)))
            out.append(f"DROP INDEX `{indexes.pop(name)}` ON {{t}}")
        elif op == "truncate":
            out.append("TRUNCATE TABLE {t}")
            ids.clear()
    # a last insert makes the final layout visible to the reader
    rid = draw(st.integers(31, 40))
    values = [literal(draw(value_of(t))) for t in cols.values()]
    out.append(f"INSERT INTO {{t}} VALUES ({', '.join([str(rid), *values])})")
    return out


@settings(
    max_examples=25,
    deadline=None,
    # Each example waits for the pipeline; shrinking a failure could take many minutes, so a
    # failure reports its whole sequence instead.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    # The same examples on every run: a random new failure in CI would hide the run's other
    # results; sequences found failing are kept as explicit examples once fixed.
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(statements=scenario())
@example(  # found by this test: an ADD COLUMN … DEFAULT followed directly by another DDL
    statements=[
        "CREATE TABLE {t} (id INT PRIMARY KEY, `c0` BIGINT, `c1` INT, `c2` BIGINT) "
        "DEFAULT CHARSET=utf8mb4",
        "INSERT INTO {t} VALUES (1, 5, 6, 7)",
        "INSERT INTO {t} VALUES (2, -5, -6, -7)",
        "ALTER TABLE {t} ADD COLUMN `n10` VARCHAR(6) DEFAULT ' éZéca'",
        "ALTER TABLE {t} MODIFY `n10` VARCHAR(12)",
        "INSERT INTO {t} VALUES (31, 0, 0, 0, 'x')",
    ]
)
@example(  # found by this test: a column rename followed by another DDL before any row
    statements=[
        "CREATE TABLE {t} (id INT PRIMARY KEY, `c0` INT, `c1` INT) DEFAULT CHARSET=utf8mb4",
        "INSERT INTO {t} VALUES (28, 0, 0)",
        "ALTER TABLE {t} RENAME COLUMN `c0` TO `r10`",
        "CREATE INDEX `i_c1` ON {t} (`c1`)",
        "INSERT INTO {t} VALUES (31, 0, 0)",
    ]
)
def test_rebuilt_table_equals_the_source(pipeline: Pipeline, statements: list[str]) -> None:
    pipeline.count += 1
    table = f"t{pipeline.count}"
    with connect(pipeline.server, pipeline.db) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql.format(t=f"`{table}`"))
    name = TableName(pipeline.db, table)
    expected = {name: source_tables(pipeline.server, [pipeline.db])[name]}

    def rebuilt() -> Rebuild:
        got = Rebuild()
        got.tables = (
            {name: pipeline.rebuilt.tables[name]} if name in pipeline.rebuilt.tables else {}
        )
        return got

    def sink_table() -> Any:
        if pipeline.query.exception() is not None:
            raise AssertionError(pipeline.query.exception())
        return source_tables(pipeline.sink, [pipeline.db]).get(name)

    def equal() -> bool:
        pipeline.drain()
        return compare(rebuilt(), expected) == {} and sink_table() == expected[name]

    try:
        # The first example also waits for the Spark query's first micro-batch.
        wait_for(equal, timeout=120 if pipeline.count == 1 else 40, interval=0.2, what=table)
    except Exception:
        raise AssertionError(
            {
                "statements": statements,
                "subscriber": compare(rebuilt(), expected),
                "spark sink": (expected[name], sink_table()),
            }
        ) from None


LATE_STATEMENTS = [
    "CREATE TABLE {t} (id INT PRIMARY KEY, a INT NOT NULL DEFAULT 3, b VARCHAR(8)) "
    "DEFAULT CHARSET=latin1",
    "INSERT INTO {t} (id, b) VALUES (1, 'x')",
    "ALTER TABLE {t} ADD COLUMN c INT NOT NULL DEFAULT 7",
    "ALTER TABLE {t} ALTER COLUMN c SET DEFAULT 9",
    "INSERT INTO {t} (id) VALUES (2)",
    "ALTER TABLE {t} ADD COLUMN d VARCHAR(4) DEFAULT 'dd', ADD UNIQUE KEY u_b (b)",
    "ALTER TABLE {t} MODIFY d VARCHAR(9) DEFAULT 'later'",
    "ALTER TABLE {t} ADD COLUMN e DECIMAL(6,2) NOT NULL DEFAULT 1.5 FIRST",
    "INSERT INTO {t} (id, b) VALUES (3, 'z')",
    "ALTER TABLE {t} DROP INDEX u_b, CHANGE b bb VARCHAR(10) DEFAULT 'q'",
    "ALTER TABLE {t} ADD COLUMN f INT DEFAULT 11",
    "ALTER TABLE {t} ALTER COLUMN f SET DEFAULT 12",
]


def test_reader_far_behind_publishes_each_ddls_own_schema(
    services: Settings,
    make_topic: Any,
    make_database: Any,
) -> None:
    """Every DDL runs before the reader starts (from a position before the CREATE), so the live
    server's defaults and indexes are those of the last state: each DDL must still carry its
    own after-schema, and the rebuilt table must equal the source."""
    server = services.sources[1]
    db = make_database(server)
    source = make_topic("late-src", partitions=2)
    checkpoints = make_topic("late-ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("late-schemas", partitions=1, **{"cleanup.policy": "compact"})
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        for sql in LATE_STATEMENTS:
            cur.execute(sql.format(t="`t`"))
    expected = source_tables(server, [db])
    setup = ReaderSetup(
        services=services,
        server=server,
        source=source,
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
    )
    rebuilt = Rebuild()
    with ExitStack() as stack:
        stack.enter_context(
            reader_thread(setup, start=f"file:{file}:{pos}", heartbeat_interval_s=0.3)
        )
        index = TopicReader(services, checkpoints)
        index.until(
            lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
            timeout=60,
            what="the reader's first checkpoint",
        )
        index.close()
        sub = stack.enter_context(
            Subscriber(
                services.kafka.client_config(),
                [source],
                checkpoints_topic=checkpoints,
                schemas_topic=schemas,
                group_id=f"late-{source}",
                topic_template="{source}",
            )
        )

        def equal() -> bool:
            for txn in sub.poll(0.2):
                for ev in txn.events:
                    if isinstance(ev, RowChange):
                        rebuilt.apply(ev, sub.table(ev))
                    elif isinstance(ev, DdlChange):
                        rebuilt.apply(ev, None)
            return compare(rebuilt, expected) == {}

        try:
            wait_for(equal, timeout=60, interval=0.1, what="the late reader's rebuild")
        except Exception:
            raise AssertionError(compare(rebuilt, expected)) from None
