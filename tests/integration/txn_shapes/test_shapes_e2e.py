"""Every transaction shape on a real source → reader → Kafka → `Subscriber`, `rowbus tail` and
the Spark apply job → sink. Each consumer must deliver the marker written after every shape (no
stall), the Subscriber's changes replayed onto empty tables must equal the source row for row,
and the sink's tables must equal the source's (keyless and unique-key tables included). Then the
same stream goes into Iceberg (issue #34; every table, keyless ones too, both forms, the same
Spark, a replayed step among them): the current state equal to the source, each change log,
in commit order, the events the Subscriber delivered."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml

from rowbus.config import Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ROOT, ReaderSetup, TopicReader, reader_thread
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark
from tests.integration.txn_shapes.shapes import MARKER, compared_tables, table_rows, write_shapes


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def replay(got: list[Transaction]) -> dict[tuple[str, str], Counter[tuple[Any, ...]]]:
    """The Subscriber's row changes applied, in order, onto empty tables (multisets)."""
    tables: dict[tuple[str, str], Counter[tuple[Any, ...]]] = {}
    for txn in got:
        for e in txn.events:
            if not isinstance(e, RowChange):
                continue
            rows = tables.setdefault((e.schema, e.table), Counter())
            if e.op in (Op.UPDATE, Op.DELETE):
                assert e.before is not None
                assert rows[tuple(e.before)] > 0, f"{e} changes a row never inserted"
                rows[tuple(e.before)] -= 1
            if e.op in (Op.UPDATE, Op.INSERT):
                assert e.after is not None
                rows[tuple(e.after)] += 1
    return {k: +v for k, v in tables.items()}


KEYLESS = ("k", "c")
"""Tables without a primary key (PROTOCOL.md §9.3): duplicates, NULLs, one of several equal rows
deleted and updated."""
CHANGE_LOG_ORDER = ("_ts", "_source", "_binlog_file", "_binlog_offset", "_txn_index")
"""How a user orders an Iceberg change log in commit order (spark_apply README)."""


def into_iceberg(
    services: Settings,
    spark: Any,
    mysql_config: Any,
    job: str,
    got: list[Transaction],
    server: Any,
    db: str,
    other: str,
    tmp_path: Path,
) -> None:
    """Every table of the shapes applied into Iceberg (both forms), read back through the
    catalog: the current state equal to the source row for row (as multisets: the keyless
    tables hold equal rows), each change log, ordered by `CHANGE_LOG_ORDER`, exactly the row
    events the Subscriber delivered for its table in their order (each once, none rolled
    back). The first step that deletes from a keyless table fails after its Iceberg commits
    (before its checkpoint) and a new driver replays it: not applied twice."""
    from pyiceberg.exceptions import NoSuchTableError

    from rowbus.routing.routes import RouteSettings
    from rowbus.spark_apply.exceptions import ApplyError
    from rowbus.spark_apply.iceberg_sink import IcebergSink
    from tests.integration.fidelity.test_values import _iceberg_config

    tables = compared_tables(db, other)
    routes = [RouteSettings(match=f"{s}.{t}") for s, t in tables]
    base = mysql_config.model_copy(
        update={
            "apply": mysql_config.apply.model_copy(
                update={
                    "job": job,
                    "state_database": f"state_{job}",
                    "routes": tuple(routes),
                    "unrouted": "skip",
                    "checkpoint_location": tmp_path / "cp_ice",
                    # each batch written inside foreachBatch: the injected failure fails it
                    "overlap_batches": False,
                }
            )
        }
    )
    config = _iceberg_config(base, tmp_path / "ice", forms=("current", "changelog"))
    applier = BatchApplier(config).start()
    sink = applier.sink
    assert isinstance(sink, IcebergSink)
    catalog = sink.tables._catalog
    # A crash between the Iceberg commits of a step that deletes one of several equal rows
    # and its checkpoint: the replay must find the step committed and not delete another.
    failed: list[int] = []
    keyless_delete = [False]
    write_step, checkpoint = sink.tables.write_step, sink.ledger.checkpoint

    def write_step_noting(batch_id: int, step: int, rows: Any) -> int:
        rows = list(rows)
        keyless_delete[0] = any(
            isinstance(e.event, RowChange) and e.event.table == "k" and e.event.op is Op.DELETE
            for e in rows
        )
        return write_step(batch_id, step, rows)

    def checkpoint_failing_once(conn: Any, cp: tuple[Any, ...], shard: int, rows: int) -> None:
        if keyless_delete[0] and not failed:
            failed.append(cp[0])
            raise ApplyError("test: the driver died after its Iceberg commits")
        checkpoint(conn, cp, shard, rows)

    sink.tables.write_step = write_step_noting  # type: ignore[method-assign]
    sink.ledger.checkpoint = checkpoint_failing_once  # type: ignore[method-assign]

    def scan(schema: str, table: str) -> list[dict[str, Any]]:
        try:
            return catalog.load_table((schema, table)).scan().to_arrow().to_pylist()  # type: ignore[no-any-return]
        except NoSuchTableError:
            return []

    def current(schema: str, table: str) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(r.values()) for r in scan(schema, table))

    want = {(s, t): table_rows(server, s, t) for s, t in tables}
    try:
        query = start_query(spark, config, applier)
        try:
            wait_for(
                lambda: query.exception() is not None or applier.writer.failure() is not None,
                timeout=180,
                interval=0.5,
                what="the injected failure to stop the query",
            )
        finally:
            query.stop()
        assert failed, "no step deleted from the keyless table"
        applier.close()
        applier = BatchApplier(config).start()  # a new driver: the batch runs again
        query = start_query(spark, config, applier)

        def replayed() -> bool:
            # Iceberg may equal the source before the replay (the failed step was the last):
            # the state database must have the failed batch done too (own connection: the
            # job's is the batch thread's).
            with connect(services.resolved_sink, f"state_{job}") as conn, conn.cursor() as cur:
                cur.execute("SELECT batch_id, complete FROM apply_head WHERE job = %s", (job,))
                head = cur.fetchone()
            return head is not None and (int(head[0]), bool(head[1])) > (failed[0], False)

        try:
            wait_for(
                lambda: (
                    query.exception() is not None
                    or (replayed() and all(current(s, t) == rows for (s, t), rows in want.items()))
                ),
                timeout=180,
                interval=1.0,
                what="Iceberg to equal the source",
            )
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
    finally:
        applier.close()
    for (s, t), rows in want.items():
        assert current(s, t) == rows, (s, t)
        delivered = [
            (e.op.value, tuple(e.before or ()), tuple(e.after or ()))
            for txn in got
            for e in txn.events
            if isinstance(e, RowChange) and (e.schema, e.table) == (s, t)
        ]
        logged = []
        for r in sorted(scan(s, f"{t}_changelog"), key=lambda r: [r[c] for c in CHANGE_LOG_ORDER]):
            before = tuple(v for k, v in r.items() if k.startswith("before_"))
            after = tuple(v for k, v in r.items() if k.startswith("after_"))
            logged.append(
                (
                    r["_op"],
                    () if r["_op"] == "insert" else before,
                    () if r["_op"] == "delete" else after,
                )
            )
        assert delivered and logged == delivered, (s, t)
    # `rowbus verify` compares a keyless Iceberg table as a multiset: equal, then a row
    # twice upstream and once in Iceberg is one missing row.
    from rowbus.verify import verify

    settings = services.model_copy(
        update={
            "apply": services.apply.model_copy(
                update={"sink_kind": "iceberg", "iceberg": config.apply.iceberg}
            )
        }
    )
    diffs = {d.target: d for d in verify(settings, routes, [db])}  # every table of db
    assert {f"iceberg:{db}.{t}" for t in KEYLESS} <= set(diffs)
    assert all(d.equal for d in diffs.values()), diffs
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO k VALUES (5, NULL)")
    diffs = {d.target: d for d in verify(settings, routes, [db])}
    assert diffs[f"iceberg:{db}.c"].equal
    k = diffs[f"iceberg:{db}.k"]
    assert (k.source_rows - k.target_rows, k.missing, k.extra) == (1, [(5, None)], []), k


def has_marker(txn: Transaction) -> bool:
    return any(isinstance(e, RowChange) and e.after and MARKER in e.after for e in txn.events)


def test_every_shape_reaches_every_consumer_and_equals_the_source(
    services: Settings,
    spark: Any,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    server = services.sources[0]
    db, other, filtered = (make_database(server) for _ in range(3))
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    topic = make_topic("src", partitions=3)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,  # the topic template is "{source}"
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
        extra={"include_schemas": [db, other]},
    )
    job = unique("job")
    ice_job = unique("ice")
    config = job_config(services, job, [topic], schemas, [], tmp_path / "cp", unrouted="identity")
    tail_config = tmp_path / "rowbus.yaml"
    tail_config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
                "subscriber": {
                    "sources": [topic],
                    "topic_template": "{source}",
                    "checkpoints_topic": checkpoints,
                    "schemas_topic": schemas,
                    "group_id": unique("tail"),
                },
            }
        )
    )
    tail_out = tmp_path / "tail.jsonl"
    applier = BatchApplier(config).start()
    tail: subprocess.Popen[bytes] | None = None
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3):
            index = TopicReader(services, checkpoints)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) and r.source == topic for r in rs),
                timeout=60,
                what="the reader's first checkpoint",
            )
            index.close()
            query = start_query(spark, config, applier)
            try:
                write_shapes(server, db, other, filtered)
                with tail_out.open("wb") as out:
                    tail = subprocess.Popen(
                        [sys.executable, "-m", "rowbus", "-c", str(tail_config), "tail", topic],
                        cwd=ROOT,
                        env=dict(os.environ),
                        stdout=out,
                    )
                got: list[Transaction] = []
                with Subscriber(
                    services.kafka.client_config(),
                    [topic],
                    checkpoints_topic=checkpoints,
                    schemas_topic=schemas,
                    group_id=unique("sub"),
                ) as sub:
                    give_up = time.monotonic() + 120  # heartbeats keep it from idling
                    sub.run(
                        got.append,
                        idle_timeout=60,
                        should_stop=lambda: (
                            any(has_marker(t) for t in got[-3:]) or time.monotonic() > give_up
                        ),
                    )
                    blocked = [str(b) for b in sub.merger.blocked_by()]
                assert any(has_marker(t) for t in got), f"the Subscriber stalled: {blocked}"
                wait_for(
                    lambda: MARKER.encode() in tail_out.read_bytes(),
                    timeout=90,
                    what="`rowbus tail` to print the marker transaction",
                )
                replayed = replay(got)
                for schema, table in compared_tables(db, other):
                    source = table_rows(server, schema, table)
                    assert replayed.get((schema, table), Counter()) == source, (schema, table)
                assert not any(s == filtered for s, _ in replayed)
                # each upstream transaction comes out whole: one GTID per transaction
                for txn in got:
                    gtids = {e.position.gtid for e in txn.events if isinstance(e, RowChange)}
                    assert len(gtids) <= 1, txn.id

                def sink_equal() -> bool:
                    if query.exception() is not None:
                        return True
                    try:
                        return all(
                            table_rows(services.resolved_sink, s, t) == table_rows(server, s, t)
                            for s, t in compared_tables(db, other)
                        )
                    except pymysql.MySQLError:
                        return False  # a target table not created yet

                wait_for(sink_equal, timeout=180, interval=1.0, what="the sink to equal the source")
                assert query.exception() is None, query.exception()
            finally:
                query.stop()
            # the same stream into Iceberg (issue #34), the same Spark
            into_iceberg(services, spark, config, ice_job, got, server, db, other, tmp_path)
    finally:
        if tail is not None:
            tail.terminate()
            tail.wait(30)
        applier.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            for name in (db, other, f"state_{job}", f"state_{ice_job}"):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    # the XA transaction prepared before others committed comes out at its commit
    ids = [
        e.after[0]
        for t in got
        for e in t.events
        if isinstance(e, RowChange) and e.table == "a" and e.after is not None
    ]
    assert ids.index(54) < ids.index(53)
    assert 52 not in ids and 4 not in ids and 9 not in ids and 30 not in ids
