"""The type matrix (`corpus.CASES`) on a real source, carried by the real reader through Kafka,
then (a) rebuilt in memory by a `Subscriber` and compared with the source row for row, column
for column, types included; (b) applied by the Spark apply job into the sink and compared with
the source by SELECTing both sides. One reader run and one Spark run serve every case."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.protocol.values import Value
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES, Case, from_source, same, select
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

Rows = dict[int, tuple[Value, ...]]


@dataclass
class MatrixRun:
    setup: ReaderSetup
    source_rows: dict[str, list[tuple[Any, ...]]]
    """Per table: the rows as pymysql reads them from the source."""
    rebuilt: dict[str, Rows] = field(default_factory=dict)
    """Per table: what the Subscriber rebuilt, id -> image."""


def _topics(services: Settings, names: dict[str, dict[str, str]]) -> None:
    admin = AdminClient(services.kafka.client_config())
    new = [
        NewTopic(n, num_partitions=int(c.pop("partitions")), replication_factor=1, config=c)
        for n, c in names.items()
    ]
    for future in admin.create_topics(new, operation_timeout=15).values():
        future.result(15)


def _drop_topics(services: Settings, names: list[str]) -> None:
    admin = AdminClient(services.kafka.client_config())
    for future in admin.delete_topics(names, operation_timeout=10).values():
        future.result(15)


def _read_source(setup: ReaderSetup) -> dict[str, list[tuple[Any, ...]]]:
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        out = {}
        for case in CASES:
            cur.execute(select(case))
            out[case.table] = list(cur.fetchall())
        return out


@pytest.fixture(scope="module")
def matrix(services: Settings) -> Iterator[MatrixRun]:
    tag = uuid.uuid4().hex[:8]
    data, ckpt, schemas = f"test.fid.{tag}", f"test.fidckpt.{tag}", f"test.fidschemas.{tag}"
    compact = {"cleanup.policy": "compact", "retention.ms": "-1", "partitions": "1"}
    _topics(
        services,
        {data: {"retention.ms": "-1", "partitions": "3"}, ckpt: dict(compact), schemas: compact},
    )
    server = services.sources[0]
    database = f"fid_{tag}"
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
            with connect(server, database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION sql_mode = ''")  # zero dates, the ENUM error value, ...
                cur.execute("SET time_zone = '+00:00'")
                for case in CASES:
                    cur.execute(case.create())
                    for statement in case.inserts():
                        cur.execute(statement)
                # before images too: the NULL row takes the value of row 1, row 1 goes
                for case in CASES:
                    cur.execute(
                        f"UPDATE `{case.table}` SET v = (SELECT v FROM (SELECT v FROM "
                        f"`{case.table}` WHERE id = 1) AS x) WHERE id = 0"
                    )
                    cur.execute(f"DELETE FROM `{case.table}` WHERE id = 1")
                    cur.execute(f"INSERT INTO `{case.table}` VALUES (-1, NULL)")
                _evolving_table(cur)
            source_rows = _read_source(setup)
            run = MatrixRun(setup, source_rows)
            run.rebuilt = _rebuild(services, setup, source_rows)
        yield run
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        _drop_topics(services, [data, ckpt, schemas])


EVOLVE = "ice_evolve"
"""A table whose schema changes mid-stream (the Iceberg sink's test): ADD COLUMN, INT to
BIGINT, DROP COLUMN, each between rows."""


def _evolving_table(cur: Any) -> None:
    for statement in (
        f"CREATE TABLE {EVOLVE} (id INT PRIMARY KEY, a INT)",
        f"INSERT INTO {EVOLVE} VALUES (1, 1), (2, 2)",
        f"ALTER TABLE {EVOLVE} ADD COLUMN b VARCHAR(10)",
        f"INSERT INTO {EVOLVE} VALUES (3, 3, 'x')",
        f"UPDATE {EVOLVE} SET b = 'y' WHERE id = 1",
        f"ALTER TABLE {EVOLVE} MODIFY a BIGINT",
        f"INSERT INTO {EVOLVE} VALUES (4, 9000000000, 'z')",
        f"DELETE FROM {EVOLVE} WHERE id = 2",
        f"ALTER TABLE {EVOLVE} DROP COLUMN b",
        f"INSERT INTO {EVOLVE} VALUES (5, 5)",
    ):
        cur.execute(statement)


def _rebuild(
    services: Settings, setup: ReaderSetup, source_rows: dict[str, list[tuple[Any, ...]]]
) -> dict[str, Rows]:
    """A Subscriber applying every released transaction to in-memory tables."""
    tables: dict[str, Rows] = {}
    wanted = {t: len(rows) for t, rows in source_rows.items()}

    def apply(txn: Any) -> None:
        for event in txn.events:
            if isinstance(event, DdlChange) and event.table:
                tables.setdefault(event.table, {})
            elif isinstance(event, RowChange):
                rows = tables.setdefault(event.table, {})
                if event.before is not None:
                    rows.pop(int(event.before[0]), None)  # type: ignore[arg-type]
                if event.after is not None:
                    rows[int(event.after[0])] = event.after  # type: ignore[arg-type]

    def done() -> bool:
        return all(len(tables.get(t, {})) == n for t, n in wanted.items())

    with Subscriber(
        services.kafka.client_config(),
        [setup.source],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=f"fid-{uuid.uuid4().hex[:8]}",
    ) as sub:
        deadline = time.monotonic() + 180
        sub.run(apply, should_stop=lambda: done() or time.monotonic() > deadline)
    missing = {
        t: n - len(tables.get(t, {})) for t, n in wanted.items() if len(tables.get(t, {})) != n
    }
    assert not missing, f"the Subscriber did not rebuild every row within 180 s: {missing}"
    return tables


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_subscriber_rebuilds_every_value_as_the_source_has_it(
    matrix: MatrixRun, case: Case
) -> None:
    source = matrix.source_rows[case.table]
    rebuilt = matrix.rebuilt[case.table]
    assert sorted(rebuilt) == [r[0] for r in source]
    wrong = []
    for row in source:
        want = from_source(case, row[1])
        got = rebuilt[row[0]][1]
        if not same(case, got, want):
            wrong.append(f"id {row[0]}: source {want!r}, rebuilt {got!r}")
    assert not wrong, f"{case.type}: " + "; ".join(wrong)


def test_spark_apply_writes_every_value_as_the_source_has_it(
    matrix: MatrixRun, services: Settings, tmp_path: Path
) -> None:
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    setup = matrix.setup
    job = f"fid_{uuid.uuid4().hex[:8]}"
    from rowbus.routing.routes import RouteSettings

    # Every case, the ENUM error value included (a STRICT sink writes it in a statement of its
    # own under a lenient sql_mode: rowbus.spark_apply.enum_error).
    cases = list(CASES)
    routes = [RouteSettings(match=f"{setup.database}.{c.table}") for c in cases]
    config = job_config(
        services,
        job,
        [setup.source],
        setup.schemas_topic,
        routes,
        tmp_path / "cp",
        unrouted="skip",
    )
    applier = BatchApplier(config).start()
    spark = shared_spark()
    try:
        query = start_query(spark, config, applier)
        try:

            def sink_rows() -> dict[str, list[tuple[Any, ...]]] | None:
                if query.exception() is not None:
                    raise AssertionError(query.exception())
                with connect(services.resolved_sink, setup.database) as conn:
                    with conn.cursor() as cur:
                        cur.execute("SET time_zone = '+00:00'")
                        out = {}
                        for case in cases:
                            cur.execute(select(case))
                            out[case.table] = list(cur.fetchall())
                # The ids, not the counts: the state before the updates has as many rows.
                if all(
                    [r[0] for r in out[c.table]] == [r[0] for r in matrix.source_rows[c.table]]
                    for c in cases
                ):
                    return out
                return None

            got = wait_for(sink_rows, timeout=300, interval=1.0, what="the sink to hold the rows")
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        wrong = [
            f"{c.type}: sink {got[c.table]!r} != source {matrix.source_rows[c.table]!r}"
            for c in cases
            if got[c.table] != matrix.source_rows[c.table]
        ]
        assert not wrong, "\n".join(wrong)
        indexes = []
        for server in (setup.server, services.resolved_sink):
            with connect(server, setup.database) as conn, conn.cursor() as cur:
                cur.execute("SELECT id, v + 0 FROM f_enum_error ORDER BY id")
                indexes.append(cur.fetchall())
        assert indexes[0] == indexes[1], "ENUM indexes (the error value is 0)"
        assert (0,) in {r[1:] for r in indexes[0]}
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{setup.database}`")
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")


# -- the Iceberg sink (issue #34) ------------------------------------------------------------

_BEYOND_ICEBERG = "decimal_max"
"""DECIMAL(65,30): beyond Iceberg's precision 38, refused before Spark starts."""


def _iceberg_value(case: Case, value: Value) -> Any:
    """A protocol value as the Iceberg sink's documented mapping stores it (README "The
    Iceberg sink": types), written out here independently of `iceberg_types`."""
    import datetime as dt
    from decimal import Decimal

    from rowbus.protocol.values import ZeroDate

    t = case.type.split("(")[0].split()[0].upper()
    if value is None or isinstance(value, ZeroDate):
        return None  # zero dates: apply.iceberg.zero_dates null in this test
    if t == "SET":
        assert isinstance(value, frozenset)
        members = case.type[case.type.index("(") + 1 : case.type.index(")")]
        order = [m.strip("'") for m in members.split("','")]
        return ",".join(m for m in order if m in value)
    if t == "TIME":
        assert isinstance(value, dt.timedelta)
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if (t == "BIGINT" and "UNSIGNED" in case.type) or case.type == "BIT(64)":
        return Decimal(value)  # type: ignore[arg-type]
    return value


def _iceberg_config(config: Any, warehouse: Path, **iceberg: Any) -> Any:
    from rowbus.spark_apply.settings import IcebergSettings

    settings = IcebergSettings(
        catalog={
            "type": "sql",
            "uri": f"sqlite:///{warehouse}/catalog.db",
            "warehouse": str(warehouse / "data"),
        },
        **iceberg,
    )
    apply = config.apply.model_copy(update={"sink_kind": "iceberg", "iceberg": settings})
    return config.model_copy(update={"apply": apply})


def _duckdb_rows(metadata_location: str, columns: str = "id, v") -> list[tuple[Any, ...]]:
    """A table's `columns` read by a second Iceberg implementation, DuckDB's (its iceberg and
    avro extensions from their wheels, nothing downloaded), from its metadata file."""
    import duckdb
    import duckdb_extension_avro  # type: ignore[import-untyped]
    import duckdb_extension_iceberg  # type: ignore[import-untyped]

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    try:
        con.execute("SET TimeZone = 'UTC'")
        for package, name in (
            (duckdb_extension_avro, "avro"),
            (duckdb_extension_iceberg, "iceberg"),
        ):
            folder = Path(package.__file__).parent
            con.execute(f"LOAD '{next(folder.glob(f'extensions/*/{name}.duckdb_extension'))}'")
        return con.execute(
            f"SELECT {columns} FROM iceberg_scan('{metadata_location}') ORDER BY id"
        ).fetchall()
    finally:
        con.close()


def test_spark_apply_into_iceberg_holds_every_value_and_event_exactly_once(
    matrix: MatrixRun, services: Settings, tmp_path: Path
) -> None:
    """The corpus through the reader and the apply job into Iceberg (both forms), read back
    through the catalog: the current state equal to the source row for row, the change log
    replayed equal to what the Subscriber rebuilt, with exactly one event per source change
    although the first batch holding rows failed after its Iceberg commit and was replayed.
    A DECIMAL(65,30) routed to Iceberg is refused before Spark starts, in one line."""
    from pyiceberg.exceptions import NoSuchTableError

    from rowbus.routing.routes import RouteSettings
    from rowbus.spark_apply.exceptions import ApplyError
    from rowbus.spark_apply.iceberg_sink import BATCH, JOB, STEP, IcebergSink
    from rowbus.spark_apply.iceberg_types import UnstorableColumnError
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    setup = matrix.setup
    job = f"ice_{uuid.uuid4().hex[:8]}"
    cases = [c for c in CASES if c.name != _BEYOND_ICEBERG]
    ns = setup.database

    def configured(selected: list[Case]) -> Any:
        routes = [RouteSettings(match=f"{setup.database}.{c.table}") for c in selected]
        routes.append(RouteSettings(match=f"{setup.database}.{EVOLVE}"))
        base = job_config(
            services,
            job,
            [setup.source],
            setup.schemas_topic,
            routes,
            tmp_path / "cp",
            unrouted="skip",
            # each batch written inside foreachBatch: the injected failure fails the query
            overlap_batches=False,
        )
        return _iceberg_config(
            base, tmp_path / "ice", forms=("current", "changelog"), zero_dates="null"
        )

    with pytest.raises(UnstorableColumnError) as refused:
        BatchApplier(configured(list(CASES))).start()
    assert "f_decimal_max.v is DECIMAL(65,30)" in str(refused.value)
    assert "\n" not in str(refused.value)

    config = configured(cases)
    applier = BatchApplier(config).start()
    sink = applier.sink
    assert isinstance(sink, IcebergSink)
    # A crash between a step's Iceberg commits and its checkpoint in the state database:
    # the first checkpoint of a step that wrote rows fails once, so Spark replays the batch.
    original = sink.ledger.checkpoint
    failed: list[int] = []

    def checkpoint_failing_once(conn: Any, cp: tuple[Any, ...], shard: int, rows: int) -> None:
        if rows and not failed:
            failed.append(cp[0])
            raise ApplyError("test: the driver died after its Iceberg commits")
        original(conn, cp, shard, rows)

    sink.ledger.checkpoint = checkpoint_failing_once  # type: ignore[method-assign]
    spark = shared_spark()
    catalog = sink.tables._catalog

    def tables() -> dict[str, list[dict[str, Any]]] | None:
        out = {}
        for c in cases:
            try:
                out[c.table] = catalog.load_table((ns, c.table)).scan().to_arrow().to_pylist()
            except NoSuchTableError:  # its first rows are not committed yet
                return None
        return out

    def caught_up() -> dict[str, list[dict[str, Any]]] | None:
        got = tables()
        if got is None:
            return None
        try:
            got[EVOLVE] = catalog.load_table((ns, EVOLVE)).scan().to_arrow().to_pylist()
        except NoSuchTableError:
            return None
        ids = {t: sorted(r["id"] for r in rows) for t, rows in got.items()}
        want = {c.table: [r[0] for r in matrix.source_rows[c.table]] for c in cases}
        return got if ids == {**want, EVOLVE: [1, 3, 4, 5]} else None

    try:
        query = start_query(spark, config, applier)
        try:
            wait_for(
                lambda: query.exception() is not None or applier.writer.failure() is not None,
                timeout=300,
                interval=0.5,
                what="the injected failure to stop the query",
            )
        finally:
            query.stop()
        assert failed, "no step with rows was written"
        applier.close()
        applier = BatchApplier(config).start()  # a new driver: the batch runs again
        query = start_query(spark, config, applier)
        try:

            def current() -> dict[str, list[dict[str, Any]]] | None:
                if query.exception() is not None:
                    raise AssertionError(query.exception())
                return caught_up()

            got = wait_for(current, timeout=300, interval=1.0, what="Iceberg to hold the rows")
        finally:
            query.stop()
        wrong = []
        for c in cases:
            rows = {r["id"]: r["v"] for r in got[c.table]}
            for sid, value in matrix.source_rows[c.table]:
                want = _iceberg_value(c, from_source(c, value))
                have = rows[sid]
                if c.type.startswith("FLOAT"):
                    ok = have == want  # the binary32 widened exactly, both sides
                else:
                    ok = type(have) is type(want) and have == want
                if not ok:
                    wrong.append(f"{c.type} id {sid}: iceberg {have!r}, source {want!r}")
        assert not wrong, "\n".join(wrong)
        # The same tables read by DuckDB's Iceberg reader: the same rows.
        differ = []
        for c in cases:
            mine = sorted((r["id"], r["v"]) for r in got[c.table])
            theirs = _duckdb_rows(catalog.load_table((ns, c.table)).metadata_location)
            if [(i, v) for i, v in theirs] != mine:
                differ.append(f"{c.type}: duckdb {theirs!r}, pyiceberg {mine!r}")
        assert not differ, "\n".join(differ)
        # Schema changes mid-stream: ADD COLUMN, INT→BIGINT, DROP COLUMN (the change log
        # keeps the dropped column and its history).
        evolved = catalog.load_table((ns, EVOLVE))
        assert [(f.name, str(f.field_type)) for f in evolved.schema().fields] == [
            ("id", "int"),
            ("a", "long"),
        ]
        assert sorted((r["id"], r["a"]) for r in got[EVOLVE]) == [
            (1, 1),
            (3, 3),
            (4, 9000000000),
            (5, 5),
        ]
        history = catalog.load_table((ns, f"{EVOLVE}_changelog")).scan().to_arrow().to_pylist()
        assert len(history) == 7
        assert sorted(
            (r["_op"], r["before_id"], r["after_id"], r["after_b"]) for r in history
        ) == sorted(
            [
                ("insert", None, 1, None),
                ("insert", None, 2, None),
                ("insert", None, 3, "x"),
                ("update", 1, 1, "y"),
                ("insert", None, 4, "z"),
                ("delete", 2, None, None),
                ("insert", None, 5, None),
            ]
        )
        # The change log: one event per source change (the replayed batch appended nothing
        # twice), and replayed in binlog order it rebuilds what the Subscriber rebuilt.
        for c in cases:
            log_rows = catalog.load_table((ns, f"{c.table}_changelog")).scan().to_arrow()
            events = sorted(log_rows.to_pylist(), key=lambda r: (r["_ts"], r["_txn_index"]))
            # inserts (a NULL row and each literal), the update of row 0, two deletes/inserts
            assert len(events) == len(c.literals) + 1 + 3, (c.name, len(events))
            state: dict[int, Any] = {}
            for e in events:
                if e["before_id"] is not None:
                    state.pop(e["before_id"], None)
                if e["after_id"] is not None:
                    state[e["after_id"]] = e["after_v"]
            rebuilt = {k: _iceberg_value(c, img[1]) for k, img in matrix.rebuilt[c.table].items()}
            assert state == rebuilt, c.name
        # One commit per (batch, step) and table: the change log's appends each carry their
        # own; the current state's commit is a delete and an append (two snapshots, one mark).
        for c in cases:
            for name, most in ((c.table, 2), (f"{c.table}_changelog", 1)):
                marks = Counter(
                    (props.get(BATCH), props.get(STEP))
                    for s in catalog.load_table((ns, name)).metadata.snapshots
                    if s.summary is not None
                    and (props := s.summary.additional_properties).get(JOB) == job
                )
                assert marks and max(marks.values()) <= most, (name, marks)
    finally:
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
