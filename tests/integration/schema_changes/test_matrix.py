"""The schema-change matrix through the whole pipeline.

Each case runs on a real source server: rows before, the DDL, rows after (some rows stay
untouched after the DDL). The real reader carries everything through Kafka; then
(b) a `Subscriber` rebuilds every table in memory from the protocol alone (DDL kind, table
schema with defaults and keys, column renames from the statement) and
(a) one Spark apply run applies all cases into the sink;
both are compared with the source: rows column for column, and the schema as
``SHOW CREATE TABLE`` shows it (column types with every parameter, nullability, defaults,
collations, primary key, other indexes); then
(c) a second run of the same Spark applies every case Iceberg's schema evolution can express
into Iceberg tables (issue #34, `iceberg_matrix`), read back through the catalog and by DuckDB,
the current state compared at the end and as it was before and right after each DDL of each
table (time travel, `compare_before_ddls`, against the Subscriber's rebuild then).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.ddl import DdlKind, TableName, parse_ddl
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.schema_changes.rebuild import Rebuild, describe, described
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark
from tests.unit.protocol.schema_rules import violations

CS = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
CASES: dict[str, list[str]] = {
    "add_column": [
        f"CREATE TABLE add_col (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO add_col VALUES (1, 10), (2, 20)",
        "ALTER TABLE add_col ADD COLUMN b VARCHAR(10) NULL",
        "INSERT INTO add_col VALUES (3, 30, 'x')",
        "UPDATE add_col SET b = 'y' WHERE id = 1",
    ],
    "add_column_not_null_default_7": [
        f"CREATE TABLE add_def (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO add_def VALUES (1, 10), (2, 20)",
        "ALTER TABLE add_def ADD COLUMN d INT NOT NULL DEFAULT 7",
        "INSERT INTO add_def VALUES (3, 30, 9)",
        "UPDATE add_def SET a = 11 WHERE id = 1",
    ],
    "drop_column": [
        f"CREATE TABLE drop_col (id INT PRIMARY KEY, a INT, b VARCHAR(5)){CS}",
        "INSERT INTO drop_col VALUES (1, 10, 'p'), (2, 20, 'q')",
        "ALTER TABLE drop_col DROP COLUMN b",
        "INSERT INTO drop_col VALUES (3, 30)",
    ],
    "modify_length": [
        f"CREATE TABLE modify_len (id INT PRIMARY KEY, s VARCHAR(4) NOT NULL){CS}",
        "INSERT INTO modify_len VALUES (1, 'abcd')",
        "ALTER TABLE modify_len MODIFY s VARCHAR(8) NOT NULL",
        "INSERT INTO modify_len VALUES (2, 'abcdefgh')",
    ],
    "modify_type": [
        f"CREATE TABLE modify_type (id INT PRIMARY KEY, n INT, p DECIMAL(5,2)){CS}",
        "INSERT INTO modify_type VALUES (1, 5, 1.25)",
        "ALTER TABLE modify_type MODIFY n BIGINT, MODIFY p DECIMAL(12,4)",
        "INSERT INTO modify_type VALUES (2, 1099511627776, 12345678.1234)",
    ],
    "change_column": [
        f"CREATE TABLE change_col (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO change_col VALUES (1, 10), (2, 20)",
        "ALTER TABLE change_col CHANGE a b BIGINT NOT NULL DEFAULT 0",
        "INSERT INTO change_col VALUES (3, 1099511627776)",
    ],
    "rename_column": [
        f"CREATE TABLE rename_col (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO rename_col VALUES (1, 10), (2, 20)",
        "ALTER TABLE rename_col RENAME COLUMN a TO z",
        "INSERT INTO rename_col VALUES (3, 30)",
    ],
    "indexes": [
        f"CREATE TABLE idx (id INT PRIMARY KEY, a INT, b INT, c INT){CS}",
        "INSERT INTO idx VALUES (1, 1, 1, 1)",
        "ALTER TABLE idx ADD INDEX ia (a), ADD UNIQUE KEY ub (b)",
        "CREATE INDEX ic ON idx (c, a)",
        "INSERT INTO idx VALUES (2, 2, 2, 2)",
        "DROP INDEX ia ON idx",
        "INSERT INTO idx VALUES (3, 3, 3, 3)",
    ],
    "primary_key_change": [
        f"CREATE TABLE pk (id INT NOT NULL, k INT NOT NULL, v INT, PRIMARY KEY (id)){CS}",
        "INSERT INTO pk VALUES (1, 10, 100), (2, 20, 200)",
        "ALTER TABLE pk DROP PRIMARY KEY, ADD PRIMARY KEY (k)",
        "INSERT INTO pk VALUES (1, 30, 300)",  # the old key 1 again: a second row
        "UPDATE pk SET v = 101 WHERE k = 10",
    ],
    "truncate": [
        f"CREATE TABLE trunc (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO trunc VALUES (1, 1), (2, 2), (3, 3)",
        "TRUNCATE TABLE trunc",
        "INSERT INTO trunc VALUES (4, 4)",
    ],
    "rename_table": [
        f"CREATE TABLE rt_old (id INT PRIMARY KEY, a INT){CS}",
        f"CREATE TABLE rt_b (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO rt_old VALUES (1, 1)",
        "INSERT INTO rt_b VALUES (1, 5)",
        "RENAME TABLE rt_old TO rt_new, rt_b TO rt_c",
        "INSERT INTO rt_new VALUES (2, 2)",
        "INSERT INTO rt_c VALUES (2, 6)",
    ],
    "drop_and_create": [
        f"CREATE TABLE dc (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO dc VALUES (1, 1)",
        "DROP TABLE dc",
        f"CREATE TABLE dc (id BIGINT PRIMARY KEY, s VARCHAR(5) NOT NULL DEFAULT 'x', "
        f"n DECIMAL(6,2)){CS}",
        "INSERT INTO dc VALUES (7, 'seven', 7.5)",
        "INSERT INTO dc (id) VALUES (8)",
    ],
    "charset": [
        "CREATE TABLE cs (id INT PRIMARY KEY, s VARCHAR(10)) DEFAULT CHARSET=latin1",
        "INSERT INTO cs VALUES (1, 'abc')",
        "ALTER TABLE cs CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "INSERT INTO cs VALUES (2, 'Zoë')",
    ],
    "create_like": [
        f"CREATE TABLE like_src (id INT PRIMARY KEY, a INT NOT NULL DEFAULT 3, "
        f"UNIQUE KEY ua (a)){CS}",
        "CREATE TABLE like_copy LIKE like_src",
        "INSERT INTO like_copy (id) VALUES (1)",
        "INSERT INTO like_copy VALUES (2, 4)",
    ],
    "generated_columns": [
        f"CREATE TABLE gen (id INT PRIMARY KEY, a INT, b INT AS (a * 2) VIRTUAL, "
        f"c INT AS (a + 1) STORED){CS}",
        "INSERT INTO gen (id, a) VALUES (1, 1), (2, 2)",
        "UPDATE gen SET a = 10 WHERE id = 1",
        # (A generated column added to existing rows: the sink computes it, an in-memory
        # rebuild cannot — the protocol carries the DDL, not the expression; README.)
        "ALTER TABLE gen ADD COLUMN e INT NULL",
        "INSERT INTO gen (id, a, e) VALUES (3, 3, 5)",
        "DELETE FROM gen WHERE id = 2",
    ],
    "sequence": [
        # A sequence's NEXTVAL writes its row in the binlog: not data, not published.
        "CREATE SEQUENCE sq START WITH 100 INCREMENT BY 5",
        "SELECT NEXTVAL(sq)",
        f"CREATE TABLE after_sq (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO after_sq VALUES (1, 1)",
    ],
    "lenient_session": [
        # A session without STRICT: its ALTER converts the rows the table holds (truncates,
        # clips); a STRICT sink would refuse the same statement unless run under that mode.
        "SET SESSION sql_mode = ''",
        f"CREATE TABLE lenient (id INT PRIMARY KEY, v VARCHAR(10), n VARCHAR(10), x INT){CS}",
        "INSERT INTO lenient VALUES (1, 'abcdefgh', '12abc', 300), (2, 'ab', '', -5)",
        "ALTER TABLE lenient MODIFY v VARCHAR(3), MODIFY n INT, MODIFY x TINYINT UNSIGNED",
        # (The converted values reach a protocol-only rebuild with the rows' next images.)
        "UPDATE lenient SET id = id + 10",
        "INSERT INTO lenient VALUES (3, 'xyzw', 'q', 999)",
        "SET SESSION sql_mode = DEFAULT",
    ],
    "latin1_session": [
        # The session says latin1 while this client sends UTF-8 (a common mismatch): the
        # server reads each byte as a latin1 character, and so must the DDL's replay.
        "SET NAMES latin1",
        f"CREATE TABLE l1s (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'é', "
        f"e ENUM('à','b') DEFAULT 'à') COMMENT 'ça'{CS}",
        "INSERT INTO l1s (id) VALUES (1)",
        "ALTER TABLE l1s ADD COLUMN w VARCHAR(5) CHARSET latin1 DEFAULT 'ü', "
        "MODIFY e ENUM('à','b','ç') DEFAULT 'ç'",
        "INSERT INTO l1s (id) VALUES (2)",
        "SET NAMES utf8mb4",
    ],
    "database": [
        "CREATE DATABASE {z}",
        f"CREATE TABLE {{z}}.t (id INT PRIMARY KEY, a INT){CS}",
        "INSERT INTO {z}.t VALUES (1, 1)",
        "DROP DATABASE {z}",
        "CREATE DATABASE {z}",
        f"CREATE TABLE {{z}}.t (id INT PRIMARY KEY, b VARCHAR(3)){CS}",
        "INSERT INTO {z}.t VALUES (2, 'two')",
    ],
}


TABLES = [
    "add_col",
    "add_def",
    "drop_col",
    "modify_len",
    "modify_type",
    "change_col",
    "rename_col",
    "idx",
    "pk",
    "trunc",
    "rt_new",
    "rt_c",
    "dc",
    "cs",
    "like_src",
    "like_copy",
    "gen",
    "after_sq",
    "lenient",
    "l1s",
]


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def source_tables(server: Any, databases: list[str]) -> dict[TableName, tuple[Any, Any]]:
    """Per table of `databases`: (describe, rows by first column) on a live server."""
    out: dict[TableName, tuple[Any, Any]] = {}
    with connect(server) as conn, conn.cursor() as cur:
        for db in databases:
            cur.execute(
                "SELECT TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA=%s AND TABLE_TYPE = 'BASE TABLE'",
                (db,),
            )
            for (table,) in cur.fetchall():
                cur.execute(f"SELECT * FROM `{db}`.`{table}`")
                names = [d[0] for d in cur.description]
                rows = sorted((dict(zip(names, r, strict=True)) for r in cur.fetchall()), key=str)
                out[TableName(db, table)] = (describe(cur, db, table), rows)
    return out


def test_schema_change_matrix_through_subscriber_and_spark(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    db = make_database(server)
    z = f"{db}_z"
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    setup = ReaderSetup(
        services=services,
        server=server,
        source=make_topic("src", partitions=3),
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
        extra={"include_schemas": [db, z]},
    )
    job = unique("job")
    ice_job = unique("ice")
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3):
            index = TopicReader(services, checkpoints)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
                timeout=60,
                what="the reader's first checkpoint",
            )
            index.close()
            with connect(server, db) as conn, conn.cursor() as cur:
                for statements in CASES.values():
                    for sql in statements:
                        cur.execute(sql.format(z=f"`{z}`"))
            expected = source_tables(server, [db, z])
            assert {str(n) for n in expected} == {f"{db}.{t}" for t in TABLES} | {f"{z}.t"}
            # the source's own truth for the case the protocol lacked: untouched rows read 7
            assert [r["d"] for r in expected[TableName(db, "add_def")][1]] == [7, 7, 9]
            rebuilt = Rebuild()
            received: list[tuple[RowChange, Any]] = []
            before_ddls = BeforeDdls()

            deadline = time.monotonic() + 240

            def caught_up() -> bool:
                # Heartbeats keep the Subscriber busy, so an idle timeout would never end a
                # rebuild that stays wrong: the deadline does, and the compare below says how.
                return rebuilt_equals(rebuilt, expected) or time.monotonic() > deadline

            with Subscriber(
                services.kafka.client_config(),
                [setup.source],
                checkpoints_topic=checkpoints,
                schemas_topic=schemas,
                group_id=unique("sub"),
                topic_template="{source}",
            ) as sub:

                def take(txn: Any) -> None:
                    for ev in txn.events:
                        if isinstance(ev, RowChange):
                            rebuilt.apply(ev, sub.table(ev))
                            received.append((ev, sub.table(ev)))
                            before_ddls.row(ev)
                        elif isinstance(ev, DdlChange):
                            before_ddls.ddl(ev, rebuilt)
                            rebuilt.apply(ev, None)
                            before_ddls.applied(rebuilt)

                sub.run(take, idle_timeout=20, should_stop=caught_up)
            report = compare(rebuilt, expected)
            assert report == {}, report
            # what the reader published obeys PROTOCOL.md §1.1 (the rules schema ids rest on)
            published = [s for s, _ in rebuilt.tables.values() if s is not None]
            assert [v for s in published for v in violations(s)] == []

            # (a) the Spark apply job, one run for every case
            config = job_config(
                services, job, [setup.source], schemas, [], tmp_path / "cp", unrouted="identity"
            )
            got = apply_until_equal(spark, config, services, [db, z], expected)
            assert set(got) == set(expected)
            for name in expected:
                assert got[name] == expected[name], name

            # (c) the same stream into Iceberg (issue #34), the same Spark
            iceberg_matrix(
                services, spark, setup, ice_job, db, z, expected, received, before_ddls, tmp_path
            )
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{z}`")
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in (db, z, f"state_{job}", f"state_{ice_job}"):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


ICEBERG_REFUSED = {
    # what Iceberg's schema evolution cannot express: routed out here, each refused in its
    # own test (tests/unit/spark_apply/test_iceberg_schema.py)
    "modify_type": "DECIMAL(5,2) to DECIMAL(12,4): a new scale",
    "lenient": "VARCHAR to INT",
}
ICEBERG_TABLES = sorted(set(TABLES) - {"modify_type", "lenient"} | {"rt_old", "rt_b"})
ICEBERG_RENAMES = {"rt_old": "rt_new", "rt_b": "rt_c"}
ICEBERG_COLUMN_RENAMES = {"rename_col": {"a": "z"}, "change_col": {"a": "b"}}


class BeforeDdls:
    """The Subscriber's rebuild of each table just before each of its DDLs, and how many
    change-log entries (row events, a TRUNCATE's event) the table had by then: what its
    Iceberg current state must hold at the step before that DDL (`compare_before_ddls`)."""

    def __init__(self) -> None:
        self.logged: Counter[TableName] = Counter()
        self.states: list[tuple[TableName, int, list[dict[str, Any]]]] = []
        self.after: dict[int, tuple[list[str], list[dict[str, Any]]]] = {}
        """By index in `states`: the table's columns and rows right after that DDL."""
        self._pending: tuple[int, TableName] | None = None

    def row(self, ev: RowChange) -> None:
        self.logged[TableName(ev.schema, ev.table)] += 1

    def ddl(self, ev: DdlChange, rebuilt: Rebuild) -> None:
        parsed = parse_ddl(ev.statement, ev.schema)
        for old, new in parsed.renames:  # the change log is renamed with its table
            self.logged[new] = self.logged.pop(old, 0)
            self.states = [(new if n == old else n, c, r) for n, c, r in self.states]
        self._pending = None
        if ev.kind in (DdlKind.DROP_TABLE, DdlKind.DROP_DATABASE):
            # the current state's table goes, its snapshots with it
            gone = set(parsed.tables)
            keep = [
                i
                for i, x in enumerate(self.states)
                if x[0] not in gone and x[0].schema != parsed.database
            ]
            self.states = [self.states[i] for i in keep]
            self.after = {n: self.after[i] for n, i in enumerate(keep) if i in self.after}
            return
        name = parsed.table
        if name is None or name not in rebuilt.tables or not self.logged[name]:
            return
        rows = [dict(r) for r in rebuilt.tables[name][1].values()]
        self.states.append((name, self.logged[name], rows))
        if ev.table_schema is not None and not parsed.renames:
            self._pending = (len(self.states) - 1, name)
        if ev.kind is DdlKind.TRUNCATE_TABLE:
            self.logged[name] += 1  # its ``truncate`` event

    def applied(self, rebuilt: Rebuild) -> None:
        """After the rebuild applied the DDL `ddl` was called with: its rows then."""
        if self._pending is None:
            return
        index, name = self._pending
        schema, rows = rebuilt.tables[name]
        assert schema is not None
        self.after[index] = ([c.name for c in schema.columns], [dict(r) for r in rows.values()])
        self._pending = None


def _mark(snapshot: Any) -> tuple[int, int, int] | None:
    """The (batch, step, DDL part) an apply job's commit carries; None for another commit."""
    from rowbus.spark_apply.iceberg_catalog import BATCH, DDL, STEP

    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    if BATCH not in props:
        return None
    return (int(props[BATCH]), int(props[STEP]), int(props.get(DDL, 0)))


def compare_before_ddls(catalog: Any, before_ddls: BeforeDdls, want: Any) -> int:
    """Each Iceberg current-state table as it was at the step before each of its DDLs (time
    travel to the newest snapshot at or before the step that committed the last change-log
    entry before the DDL, read with that snapshot's schema) equal to the Subscriber's rebuild
    then, and right after the DDL (the same files, the TRUNCATE's commit included, read with
    the first later schema holding the columns the DDL left: renamed, added with their
    initial defaults, dropped) equal to the rebuild after it. Returns how many states were
    compared."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    compared = 0
    for index, (name, count, rows) in enumerate(before_ddls.states):
        if name not in want:
            continue
        log = catalog.load_table((name.schema, f"{name.table}_changelog"))
        marks = [
            (m, int(snap.summary.additional_properties["total-records"]))
            for snap in log.metadata.snapshots
            if (m := _mark(snap)) is not None
        ]
        at = next(m for m, total in marks if total >= count)
        # A step ends at its DDL: a TRUNCATE's commit in the step of `at` (its DDL part) is
        # this DDL when rows were held before it, an earlier one when none were.
        bound = (at[0], at[1], 0 if rows else 1)
        table = catalog.load_table((name.schema, name.table))
        held = [
            snap
            for snap in table.metadata.snapshots
            if (m := _mark(snap)) is not None and m <= bound
        ]
        got = table.scan(snapshot_id=held[-1].snapshot_id).to_arrow().to_pylist() if held else []
        assert _by_str(got) == _by_str(rows), (name, count, at)
        compared += 1
        after = before_ddls.after.get(index)
        if after is None or not held:
            continue
        # Right after the DDL: the same files (a TRUNCATE's commit included) read with the
        # first schema that has the columns the DDL left (its schema commit, or none).
        names, rows_after = after
        last = [
            x
            for x in table.metadata.snapshots
            if (m := _mark(x)) is not None and m <= (at[0], at[1], 1)
        ][-1]
        schema = next(
            sc
            for sc in table.metadata.schemas
            if sc.schema_id >= (last.schema_id or 0) and {f.name for f in sc.fields} == set(names)
        )
        tasks = table.scan(snapshot_id=last.snapshot_id).plan_files()
        read = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks)
        assert _by_str(read.to_pylist()) == _by_str(rows_after), (name, "after", at)
        compared += 1
    return compared


def _image(row: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A change-log row's image: its `prefix` columns that hold a value, by column name."""
    return {k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix) and v is not None}


def _renamed(table: Any, values: Any, renames: dict[str, str]) -> dict[str, Any]:
    """A Subscriber's row image by its columns' names after their renames, values only."""
    if values is None:
        return {}
    image = table.image_dict(values)
    return {renames.get(k, k): v for k, v in image.items() if v is not None}


def _by_str(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: str(sorted(r.items())))


def iceberg_matrix(
    services: Settings,
    spark: Any,
    setup: ReaderSetup,
    job: str,
    db: str,
    z: str,
    expected: dict[TableName, tuple[Any, Any]],
    received: list[tuple[RowChange, Any]],
    before_ddls: BeforeDdls,
    tmp_path: Path,
) -> None:
    """Every case but `ICEBERG_REFUSED` applied into Iceberg (both forms) by one run, read back
    through the catalog: each current-state table equal to the source row for row, each
    change log holding exactly the row events the Subscriber received (by the table's and its
    columns' names after their renames), one ``truncate`` event for the TRUNCATE."""
    from pyiceberg.exceptions import NoSuchTableError

    from rowbus.routing.routes import RouteSettings
    from rowbus.spark_apply.iceberg_sink import IcebergSink
    from tests.integration.fidelity.test_values import _duckdb_rows, _iceberg_config

    routes = [RouteSettings(match=f"{db}.{t}") for t in ICEBERG_TABLES]
    routes.append(RouteSettings(match=f"{z}.t"))
    base = job_config(
        services,
        job,
        [setup.source],
        setup.schemas_topic,
        routes,
        tmp_path / "cp_ice",
        unrouted="skip",
    )
    config = _iceberg_config(base, tmp_path / "ice", forms=("current", "changelog"))
    want = {n: _by_str(rows) for n, (_, rows) in expected.items() if n.table not in ICEBERG_REFUSED}
    applier = BatchApplier(config).start()
    sink = applier.sink
    assert isinstance(sink, IcebergSink)
    catalog = sink.tables._catalog

    def scan(ident: tuple[str, str]) -> list[dict[str, Any]] | None:
        try:
            return catalog.load_table(ident).scan().to_arrow().to_pylist()  # type: ignore[no-any-return]
        except NoSuchTableError:
            return None

    def current() -> dict[TableName, list[dict[str, Any]]]:
        return {n: _by_str(scan((n.schema, n.table)) or []) for n in want}

    try:
        with ExitStack() as stack:
            query = start_query(spark, config, applier)
            stack.callback(query.stop)
            wait_for(
                lambda: query.exception() is not None or current() == want,
                timeout=240,
                interval=2.0,
                what="Iceberg to equal the source",
            )
            assert query.exception() is None, query.exception()
    finally:
        applier.close()
    got = current()
    for name in want:
        assert got[name] == want[name], name
    # Not only at the end: each table as it was before and right after each of its DDLs.
    # 14 DDLs of tables that held rows: the state before each and right after it
    assert compare_before_ddls(catalog, before_ddls, want) >= 28
    # The same tables read by DuckDB's Iceberg reader (renamed columns, initial defaults and
    # all): the same rows.
    for name in (n for n in want if want[n]):  # (a table never written has no Iceberg table)
        table = catalog.load_table((name.schema, name.table))
        columns = [f.name for f in table.schema().fields]
        theirs = _duckdb_rows(table.metadata_location, ", ".join(f'"{c}"' for c in columns))
        mine = [tuple(r[c] for c in columns) for r in got[name]]
        assert sorted(theirs, key=str) == sorted(mine, key=str), name
    # The renamed and dropped tables are gone from the catalog; the re-created one is new.
    assert scan((db, "rt_old")) is None and scan((db, "rt_b")) is None
    # The primary key moved: the identifier fields with it.
    assert catalog.load_table((db, "pk")).schema().identifier_field_names() == {"k"}
    # The change log: what the Subscriber received, event for event.
    events: dict[tuple[str, str], list[Any]] = {}
    for ev, table in received:
        name = ICEBERG_RENAMES.get(ev.table, ev.table)
        if ev.table in ICEBERG_REFUSED or (ev.schema, name) not in {
            (n.schema, n.table) for n in want
        }:
            continue
        renames = ICEBERG_COLUMN_RENAMES.get(name, {})

        events.setdefault((ev.schema, name), []).append(
            {
                "op": ev.op.value,
                "before": _renamed(table, ev.before, renames),
                "after": _renamed(table, ev.after, renames),
            }
        )
    for n in want:
        rows = scan((n.schema, f"{n.table}_changelog")) or []
        truncates = [r for r in rows if r["_op"] == "truncate"]
        assert len(truncates) == (1 if n.table == "trunc" else 0), n
        logged = [
            {"op": r["_op"], "before": _image(r, "before_"), "after": _image(r, "after_")}
            for r in rows
            if r["_op"] != "truncate"
        ]
        assert _by_str(logged) == _by_str(events.get((n.schema, n.table), [])), n


def apply_until_equal(
    spark: Any,
    config: Any,
    services: Settings,
    databases: list[str],
    expected: dict[TableName, tuple[Any, Any]],
) -> dict[TableName, tuple[Any, Any]]:
    """Run the Spark apply job of `config` until the sink's `databases` equal `expected` (or
    the query fails, or 240 s pass); what the sink then holds."""
    applier = BatchApplier(config).start()
    try:
        with ExitStack() as stack:
            query = start_query(spark, config, applier)
            stack.callback(query.stop)

            def sink_equal() -> bool:
                if query.exception() is not None:
                    return True
                return source_tables(services.resolved_sink, databases) == expected

            wait_for(sink_equal, timeout=240, interval=2.0, what="the sink to equal the source")
            assert query.exception() is None, query.exception()
    finally:
        applier.close()
    return source_tables(services.resolved_sink, databases)


def rebuilt_equals(rebuilt: Rebuild, expected: dict[TableName, tuple[Any, Any]]) -> bool:
    return compare(rebuilt, expected) == {}


def compare(rebuilt: Rebuild, expected: dict[TableName, tuple[Any, Any]]) -> dict[str, Any]:
    """Per table that differs: what the source has and what the rebuild has."""
    out: dict[str, Any] = {}
    for name in set(expected) | set(rebuilt.tables):
        if name not in rebuilt.tables or name not in expected:
            out[str(name)] = "missing in rebuild" if name in expected else "extra in rebuild"
            continue
        schema, rows = rebuilt.tables[name]
        want_schema, want_rows = expected[name]
        got_schema = described(schema) if schema is not None else None
        got_rows = sorted(rows.values(), key=str)
        if got_schema != want_schema or got_rows != want_rows:
            out[str(name)] = {
                "schema": (want_schema, got_schema) if got_schema != want_schema else None,
                "rows": (want_rows, got_rows) if got_rows != want_rows else None,
            }
    return out
