"""The fidelity corpus and the schema-change matrix from a source whose binlog is compressed
(MariaDB ``log_bin_compress=ON``, issue #29), through the Subscriber and the Spark sink, each
compared with the source (not with an uncompressed run).

A private MariaDB starts with compression on and ``log_bin_compress_min_len`` at its minimum
(10), so no other test's source ever writes a compressed event and this one writes every event
MariaDB compresses at all. One reader carries both suites (the corpus of `corpus.CASES` in one
database, the cases of `test_matrix.CASES` in another) through Kafka; one Subscriber rebuilds
both (the corpus compared value for value with `corpus.same`, the matrix with its schemas by
`test_matrix.compare`); one Spark query applies both to the sink, compared by SELECTing both
sides. The uncompressed path stays covered by `test_values` and `test_matrix` themselves.

MariaDB decides per event: a statement of 10 bytes or more is written Query_compressed (not
CREATE/DROP DATABASE, which it writes plain), and a rows event is compressed when the first
row it holds, with its before image for an UPDATE, takes 10 bytes or more. So the corpus's
rows are inserted largest literal first and its NULL row last (test_values inserts the NULL row
first, which keeps every rows event of it plain); a TINYINT row (6 bytes) still cannot start a
compressed event, but every corpus table's UPDATE is one. The binlog's own event types are
checked, so the test fails if the server stopped compressing.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.ddl import TableName
from rowbus.protocol.events import DdlChange, ReaderCheckpoint, RowChange
from rowbus.waiting import WaitTimeoutError, wait_for
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES, Case, from_source, same, select
from tests.integration.fidelity.test_values import _drop_topics, _read_source, _topics
from tests.integration.producer.helpers import (
    ReaderSetup,
    TopicReader,
    private_source,
    reader_thread,
)
from tests.integration.schema_changes import test_matrix
from tests.integration.schema_changes.rebuild import Rebuild

COMPRESSION = ("--log-bin-compress=ON", "--log-bin-compress-min-len=10")
"""The server's options: compression on, at the smallest threshold MariaDB accepts."""

Tables = dict[TableName, tuple[Any, Any]]


def corpus_statements(case: Case) -> list[str]:
    """The corpus table of `case` created and filled with the rows `Case.inserts` writes, in
    one statement, its largest literal first (which decides whether the event is compressed)."""
    rows = sorted(enumerate(case.literals, 1), key=lambda r: -len(r[1]))
    values = [f"({i}, {lit})" for i, lit in rows] + ["(0, NULL)"]
    return [case.create(), f"INSERT INTO `{case.table}` VALUES {', '.join(values)}"]


@dataclass
class CompressedRun:
    setup: ReaderSetup
    """The reader's setup; `setup.database` holds the corpus."""
    matrix: list[str]
    """The matrix's two databases (its own and the one its `database` case drops)."""
    corpus_rows: dict[str, list[tuple[Any, ...]]]
    """Per corpus table: its rows on the source as `corpus.select` reads them."""
    matrix_tables: Tables
    """Per matrix table on the source: (describe, rows)."""
    binlog: BinlogTypes
    """What the source's binlog holds from before the first statement of either suite on."""
    corpus_rebuilt: Rebuild = field(default_factory=Rebuild)
    matrix_rebuilt: Rebuild = field(default_factory=Rebuild)


@dataclass
class BinlogTypes:
    """The event types a server's binlog holds from a position on."""

    statements: Counter[str] = field(default_factory=Counter)
    """Query events but BEGIN and COMMIT, by type (Query, Query_compressed)."""
    plain: list[str] = field(default_factory=list)
    """The statements of those written as plain Query events."""
    rows: dict[str, Counter[str]] = field(default_factory=dict)
    """Per ``schema.table`` (as its Table_map names it): its rows events by type."""


def binlog_types(server: MySQLSettings, start: tuple[str, int]) -> BinlogTypes:
    """What `server`'s binlog files hold from `start` (file, position) on."""
    out = BinlogTypes()
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(r[0]) for r in cur.fetchall() if str(r[0]) >= start[0]]
        for file in files:
            cur.execute(
                f"SHOW BINLOG EVENTS IN '{file}' FROM {start[1] if file == start[0] else 4}"
            )
            table = ""
            for _, _, kind, _, _, info in cur.fetchall():
                if kind == "Table_map":  # "table_id: 33 (db.t)"
                    table = str(info).split("(", 1)[1].rstrip(")")
                elif kind.startswith("Query") and str(info) not in ("BEGIN", "COMMIT"):
                    out.statements[kind] += 1
                    if kind == "Query":
                        out.plain.append(str(info))
                elif "_rows" in kind:
                    out.rows.setdefault(table, Counter())[kind] += 1
    return out


@pytest.fixture(scope="module")
def run(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CompressedRun]:
    tag = uuid.uuid4().hex[:8]
    data, ckpt, schemas = f"test.zfid.{tag}", f"test.zfidckpt.{tag}", f"test.zfidschemas.{tag}"
    compact = {"cleanup.policy": "compact", "retention.ms": "-1", "partitions": "1"}
    _topics(
        services,
        {data: {"retention.ms": "-1", "partitions": "3"}, ckpt: dict(compact), schemas: compact},
    )
    corpus_db, matrix_db = f"zfid_{tag}", f"zmat_{tag}"
    matrix = [matrix_db, f"{matrix_db}_z"]
    base = ReaderSetup(
        services,
        services.sources[0],
        data,
        corpus_db,
        "{source}",
        ckpt,
        schemas,
        extra={"include_schemas": [corpus_db, *matrix]},
    )
    try:
        with private_source(base, tmp_path_factory.mktemp("zlib"), 95, extra=COMPRESSION) as setup:
            yield _run(setup, matrix)
    finally:
        _drop_topics(services, [data, ckpt, schemas])
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for db in (corpus_db, *matrix):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _run(setup: ReaderSetup, matrix: list[str]) -> CompressedRun:
    """Both suites written on the compressed source while the reader runs, then rebuilt by a
    Subscriber from what it published."""
    server = setup.server
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.log_bin_compress, @@GLOBAL.log_bin_compress_min_len")
        assert cur.fetchone() == (1, 10)
        cur.execute(f"CREATE DATABASE `{matrix[0]}`")
        cur.execute("SHOW MASTER STATUS")
        status = cur.fetchone()
        assert status is not None
    with reader_thread(setup, heartbeat_interval_s=0.3):
        index = TopicReader(setup.services, setup.checkpoints_topic)
        index.until(lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs), 60, "a checkpoint")
        index.close()
        with connect(server, setup.database) as conn, conn.cursor() as cur:
            # The corpus as test_values writes it (sql_mode '' for zero dates, the ENUM error
            # value, ...), its rows in the order above.
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("SET time_zone = '+00:00'")
            for case in CASES:
                for statement in corpus_statements(case):
                    cur.execute(statement)
            for case in CASES:
                cur.execute(
                    f"UPDATE `{case.table}` SET v = (SELECT v FROM (SELECT v FROM "
                    f"`{case.table}` WHERE id = 1) AS x) WHERE id = 0"
                )
                cur.execute(f"DELETE FROM `{case.table}` WHERE id = 1")
                cur.execute(f"INSERT INTO `{case.table}` VALUES (-1, NULL)")
        with connect(server, matrix[0]) as conn, conn.cursor() as cur:
            for statements in test_matrix.CASES.values():
                for sql in statements:
                    cur.execute(sql.format(z=f"`{matrix[1]}`"))
        out = CompressedRun(
            setup,
            matrix,
            _read_source(setup),
            test_matrix.source_tables(server, matrix),
            binlog_types(server, (str(status[0]), int(status[1]))),
        )
        _rebuild(out)
    return out


def _corpus_differences(
    run: CompressedRun, rows_of: dict[str, dict[Any, Any]]
) -> dict[str, list[str]]:
    """Per corpus table that differs from the source: its wrong ids or values (`rows_of`: per
    table, id -> the value of column v)."""
    out: dict[str, list[str]] = {}
    for case in CASES:
        source = run.corpus_rows[case.table]
        got = rows_of.get(case.table, {})
        if sorted(got) != [r[0] for r in source]:
            out[case.table] = [f"ids {sorted(got)} != source {[r[0] for r in source]}"]
            continue
        wrong = [
            f"id {sid}: source {want!r}, rebuilt {got[sid]!r}"
            for sid, value in source
            if not same(case, got[sid], want := from_source(case, value))
        ]
        if wrong:
            out[case.table] = wrong
    return out


def _rebuilt_corpus(run: CompressedRun) -> dict[str, dict[Any, Any]]:
    """The rebuilt corpus tables: id -> the value of column v."""
    return {
        name.table: {key[0]: row["v"] for key, row in rows.items()}
        for name, (_schema, rows) in run.corpus_rebuilt.tables.items()
        if name.schema == run.setup.database
    }


def _rebuild(run: CompressedRun) -> None:
    """A Subscriber applying every released transaction: the corpus's events (its database's)
    to one `Rebuild`, the matrix's to another, until both equal the source (or 240 s pass;
    the tests then say what differs)."""
    setup = run.setup
    deadline = time.monotonic() + 240

    def done() -> bool:
        if time.monotonic() > deadline:
            return True
        return not _corpus_differences(run, _rebuilt_corpus(run)) and (
            test_matrix.compare(run.matrix_rebuilt, run.matrix_tables) == {}
        )

    with Subscriber(
        setup.services.kafka.client_config(),
        [setup.source],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=f"zfid-{uuid.uuid4().hex[:8]}",
        topic_template="{source}",
    ) as sub:

        def take(txn: Any) -> None:
            for ev in txn.events:
                if not isinstance(ev, RowChange | DdlChange):
                    continue
                # A DDL's schema is its session's: the matrix's statements on its second
                # database run in a session of its first.
                corpus = ev.schema == setup.database
                rebuilt = run.corpus_rebuilt if corpus else run.matrix_rebuilt
                rebuilt.apply(ev, sub.table(ev) if isinstance(ev, RowChange) else None)

        sub.run(take, should_stop=done)


def test_the_source_wrote_both_suites_compressed(run: CompressedRun) -> None:
    """Every statement but CREATE/DROP DATABASE is Query_compressed; each corpus table's
    UPDATE is a compressed rows event and most of its INSERTs are; the matrix has compressed
    inserts; deletes of both are compressed where their row is long enough."""
    binlog = run.binlog
    z = run.matrix[1]
    assert set(binlog.plain) <= {f"CREATE DATABASE `{z}`", f"DROP DATABASE `{z}`"}, binlog.plain
    # the corpus's CREATE TABLEs, and the matrix's DDL (several per case)
    assert binlog.statements["Query_compressed"] >= len(CASES) + len(test_matrix.CASES)
    corpus = [binlog.rows.get(f"{run.setup.database}.{c.table}", Counter()) for c in CASES]
    assert all(t["Update_rows_compressed_v1"] == 1 for t in corpus), corpus
    assert sum(1 for t in corpus if t["Write_rows_compressed_v1"]) > len(CASES) // 2, corpus
    assert sum(1 for t in corpus if t["Delete_rows_compressed_v1"]) > len(CASES) // 3, corpus
    matrix = Counter[str]()
    for name, counts in binlog.rows.items():
        if name.split(".")[0] in run.matrix:
            matrix.update(counts)
    assert matrix["Write_rows_compressed_v1"] >= len(test_matrix.TABLES) // 2, matrix
    assert matrix["Update_rows_compressed_v1"] >= 3, matrix


def test_the_subscriber_rebuilds_both_suites_as_the_source_has_them(run: CompressedRun) -> None:
    assert _corpus_differences(run, _rebuilt_corpus(run)) == {}
    assert test_matrix.compare(run.matrix_rebuilt, run.matrix_tables) == {}


def test_the_spark_sink_holds_both_suites_as_the_source_has_them(
    run: CompressedRun, services: Settings, tmp_path: Path
) -> None:
    """One Spark query applies both suites (every table routed to its own name in the sink)."""
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    setup = run.setup
    job = f"zfid_{uuid.uuid4().hex[:8]}"
    config = job_config(
        services,
        job,
        [setup.source],
        setup.schemas_topic,
        [],
        tmp_path / "cp",
        unrouted="identity",
    )
    sink = services.resolved_sink

    def sink_corpus() -> dict[str, list[tuple[Any, ...]]]:
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(f"USE `{setup.database}`")
            out = {}
            for case in CASES:
                cur.execute(select(case))
                out[case.table] = list(cur.fetchall())
            return out

    applier = BatchApplier(config).start()
    try:
        query = start_query(shared_spark(), config, applier)
        try:

            def equal() -> bool:
                if query.exception() is not None:
                    return True
                return sink_corpus() == run.corpus_rows and (
                    test_matrix.source_tables(sink, run.matrix) == run.matrix_tables
                )

            # (Until then a database or table may be missing: the wait counts that as "not
            # yet".) On a timeout the comparisons below say what differs.
            with contextlib.suppress(WaitTimeoutError):
                wait_for(equal, timeout=300, interval=1.0, what="the sink to equal the source")
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        corpus = sink_corpus()
        wrong = {
            c.table: f"sink {corpus[c.table]!r} != source {run.corpus_rows[c.table]!r}"
            for c in CASES
            if corpus[c.table] != run.corpus_rows[c.table]
        }
        assert not wrong, wrong
        tables = test_matrix.source_tables(sink, run.matrix)
        assert set(tables) == set(run.matrix_tables)
        for name, want in run.matrix_tables.items():
            assert tables[name] == want, name
        indexes = []
        for server in (setup.server, sink):
            with connect(server, setup.database) as conn, conn.cursor() as cur:
                cur.execute("SELECT id, v + 0 FROM f_enum_error ORDER BY id")
                indexes.append(cur.fetchall())
        assert indexes[0] == indexes[1], "ENUM indexes (the error value is 0)"
        assert (0,) in {r[1:] for r in indexes[0]}
    finally:
        applier.close()
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
