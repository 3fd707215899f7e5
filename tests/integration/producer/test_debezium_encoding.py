"""The debezium encoding on the real stack: a reader on MariaDB publishes the fidelity corpus
(`tests.integration.fidelity.corpus`) with ``encoding: debezium`` — its inserts, then, after a
restart from its checkpoint, a delete per table — and a plain confluent-kafka consumer reads it
with ``json.loads`` as any Debezium consumer would — by the Connect schemas in the records
alone — and rebuilds each table, which must equal the source row for row, each change once.

Where Debezium's format cannot carry a value (a zero date is null in it; an unsigned BIGINT is
a signed int64 in it, ``bigint.unsigned.handling.mode=long``), the check is that the record
holds what Debezium's format holds for it."""

from __future__ import annotations

import base64
import datetime as dt
import json
import signal
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer  # type: ignore[attr-defined]
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from rowbus.clients.mysql import binlog_position
from rowbus.config import Settings
from rowbus.protocol.events import ReaderCheckpoint
from rowbus.protocol.topics import checkpoint_key, fragment_key
from rowbus.protocol.values import Value, ZeroDate
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.bounded.helpers import (
    binlog_end,
    checkpoints_by_key,
    create_big_table,
    insert_big_transaction,
)
from tests.integration.fidelity.corpus import CASES, Case, from_source, same, select
from tests.integration.producer.helpers import (
    ReaderSetup,
    TopicReader,
    reader_thread,
    start_reader_process,
)

EPOCH = dt.datetime(1970, 1, 1)


def from_debezium(field: dict[str, Any], value: Any) -> Value:
    """A Debezium JSON value as a consumer reads it from its Connect schema alone."""
    if value is None:
        return None
    name, ctype = field.get("name"), field["type"]
    match name:
        case "org.apache.kafka.connect.data.Decimal":
            unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
            return Decimal(f"{unscaled}E-{field['parameters']['scale']}")
        case "io.debezium.data.Bits":
            return int.from_bytes(base64.b64decode(value), "little")
        case "io.debezium.time.Date":
            return dt.date(1970, 1, 1) + dt.timedelta(days=value)
        case "io.debezium.time.Timestamp":
            return EPOCH + dt.timedelta(milliseconds=value)
        case "io.debezium.time.MicroTimestamp":
            return EPOCH + dt.timedelta(microseconds=value)
        case "io.debezium.time.ZonedTimestamp":
            return dt.datetime.fromisoformat(value)
        case "io.debezium.time.MicroTime":
            return dt.timedelta(microseconds=value)
        case "io.debezium.data.EnumSet":
            return frozenset(value.split(",")) if value else frozenset()
    if ctype == "boolean":
        return int(value)
    if ctype == "bytes":
        return base64.b64decode(value)
    if ctype == "float":  # a binary32, as a Java consumer parses it (1.4E-45 is the denormal)
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    if ctype == "double":
        return float(value)
    return value  # type: ignore[no-any-return]


def _expected(case: Case, source: Value) -> Value:
    """What Debezium's format holds for a source value it cannot carry as it is."""
    if isinstance(source, ZeroDate):
        return None
    if case.name == "bigint_u" and isinstance(source, int) and source >= 1 << 63:
        return source - (1 << 64)
    return source


@pytest.fixture(scope="module")
def published(services: Settings) -> Iterator[tuple[ReaderSetup, str, list[dict[str, Any]]]]:
    tag = uuid.uuid4().hex[:8]
    prefix, database = f"test.dbz{tag}", f"dbz_{tag}"
    server = services.sources[0]
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    setup = ReaderSetup(
        services, server, f"dbzsrc{tag}", database, f"test.dbzn.{tag}",
        f"test.dbzckpt.{tag}", f"test.dbzschemas.{tag}",
    )  # fmt: skip
    settings = {
        "encoding": "debezium",
        "partitions": 2,
        "heartbeat_interval_s": 0.3,
        "debezium": {"topic_prefix": prefix, "transaction_metadata": True},
    }
    try:
        with reader_thread(setup, **settings) as reader:
            index = TopicReader(services, setup.checkpoints_topic)
            index.until(
                lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs), 60, "a checkpoint"
            )
            index.close()
            with connect(server, database) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION sql_mode = ''")
                cur.execute("SET time_zone = '+00:00'")
                for case in CASES:
                    cur.execute(case.create())
                    for statement in case.inserts():
                        cur.execute(statement)
                end = binlog_position(cur)
            assert end is not None
            wait_for(
                lambda: (
                    reader.committed is not None
                    and (reader.committed.file, reader.committed.offset) >= end
                ),
                timeout=60,
                what="the reader to commit the inserts",
            )
        # The deletes while the reader is down: the next one resumes from its checkpoint.
        with connect(server, database) as conn, conn.cursor() as cur:
            for case in CASES:
                cur.execute(f"DELETE FROM `{case.table}` WHERE id = 1")
        with reader_thread(setup, **settings):
            yield setup, prefix, _consume(services, prefix, database)
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin = AdminClient(services.kafka.client_config())
        mine = [
            t
            for t in admin.list_topics(timeout=15).topics
            if t.startswith((prefix, f"__debezium-heartbeat.{prefix}", "test.dbz")) and tag in t
        ]
        for future in admin.delete_topics(mine, operation_timeout=10).values():
            future.result(15)
        del admin  # a failing test's traceback keeps this frame: the client must not live on


def _consume(services: Settings, prefix: str, database: str) -> list[dict[str, Any]]:
    """Everything under `prefix`, read as a Debezium consumer reads it (read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": services.kafka.client_config()["bootstrap.servers"],
            "group.id": f"dbz-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 300,
            "receive.message.max.bytes": 1 << 30,
        }
    )
    # Each table: its rows (ids 0..n) and the delete of id 1 with its tombstone.
    want = {f"{prefix}.{database}.{c.table}": len(c.literals) + 3 for c in CASES}
    # BEGIN and END of the insert and of the delete of each table; a heartbeat.
    want[f"{prefix}.transaction"] = 4 * len(CASES)
    want[f"__debezium-heartbeat.{prefix}"] = 1
    got: dict[str, int] = {}
    records: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    try:
        consumer.subscribe(
            [f"^{prefix.replace('.', '[.]')}[.].*", f"__debezium-heartbeat.{prefix}"]
        )
        deadline = time.monotonic() + 90
        while any(got.get(t, 0) < n for t, n in want.items()):
            assert time.monotonic() < deadline, {
                t: (got.get(t, 0), n) for t, n in want.items() if got.get(t, 0) < n
            }
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            where = (msg.topic(), msg.partition(), msg.offset())
            if where in seen:
                continue  # read again after the pattern subscription rebalanced
            seen.add(where)
            key, value = msg.key(), msg.value()
            records.append(
                {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "key": None if key is None else json.loads(key),
                    "value": None if value is None else json.loads(value),
                }
            )
            got[msg.topic()] = got.get(msg.topic(), 0) + 1
        # What is there beyond the counts (a duplicate would be): read until 1 s passes empty.
        quiet = time.monotonic() + 1
        while time.monotonic() < quiet:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None or msg.topic().startswith("__debezium"):
                continue
            where = (msg.topic(), msg.partition(), msg.offset())
            if where not in seen and not msg.topic().endswith(".transaction"):
                seen.add(where)
                key, value = msg.key(), msg.value()
                records.append(
                    {
                        "topic": msg.topic(),
                        "partition": msg.partition(),
                        "key": None if key is None else json.loads(key),
                        "value": None if value is None else json.loads(value),
                    }
                )
                quiet = time.monotonic() + 1
    finally:
        consumer.close()
    return records


def test_a_debezium_consumer_rebuilds_every_value_as_the_source_has_it(
    published: tuple[ReaderSetup, str, list[dict[str, Any]]],
) -> None:
    setup, prefix, records = published
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        source = {}
        for case in CASES:
            cur.execute(select(case))
            source[case.table] = list(cur.fetchall())
    wrong = []
    for case in CASES:
        topic = f"{prefix}.{setup.database}.{case.table}"
        rows: dict[int, Value] = {}
        last_delete: Any = None
        for r in (r for r in records if r["topic"] == topic):
            value, key = r["value"], r["key"]["payload"]
            if value is None:  # the tombstone follows its delete, same key
                assert last_delete == key, f"{topic}: tombstone of {key} after {last_delete}"
                last_delete = None
                continue
            payload = value["payload"]
            assert (
                payload["source"]["db"] == setup.database
                and payload["source"]["table"] == case.table
            )
            after = {f["field"]: f for f in value["schema"]["fields"]}["after"]
            v_field = {f["field"]: f for f in after["fields"]}["v"]
            if payload["op"] == "d":
                rows.pop(payload["before"]["id"])
                last_delete = key
            else:
                assert payload["op"] == "c", payload["op"]
                assert key == {"id": payload["after"]["id"]}
                rows[payload["after"]["id"]] = from_debezium(v_field, payload["after"]["v"])
        assert sorted(rows) == [row[0] for row in source[case.table]], case.name
        for row_id, raw in source[case.table]:
            want = _expected(case, from_source(case, raw))
            got = rows[row_id]
            ok = want is got if want is None or got is None else same(case, got, want)
            if not ok:
                wrong.append(f"{case.type} id {row_id}: source {want!r}, debezium json {got!r}")
    assert not wrong, "\n".join(wrong)


def test_a_restarted_reader_publishes_each_change_once(
    published: tuple[ReaderSetup, str, list[dict[str, Any]]],
) -> None:
    _, prefix, records = published
    changes = [
        (
            r["topic"],
            r["value"]["payload"]["op"],
            json.dumps(r["key"]),
            r["value"]["payload"]["source"]["pos"],
        )
        for r in records
        if r["value"] is not None and r["topic"].startswith(f"{prefix}.dbz_")
    ]
    assert len(changes) == len(set(changes)), "a change published twice across the restart"
    deletes = sum(op == "d" for _, op, _, _ in changes)
    tombstones = sum(r["value"] is None for r in records)
    assert deletes == tombstones == len(CASES)


def test_transactions_and_watermarks_go_where_debezium_puts_them(
    published: tuple[ReaderSetup, str, list[dict[str, Any]]],
) -> None:
    _, prefix, records = published
    txns = [r["value"]["payload"] for r in records if r["topic"] == f"{prefix}.transaction"]
    ends = [t for t in txns if t["status"] == "END"]
    assert ends and len(ends) == sum(t["status"] == "BEGIN" for t in txns)
    for end in ends:
        assert end["event_count"] == sum(c["event_count"] for c in end["data_collections"])
    beats = [r for r in records if r["topic"] == f"__debezium-heartbeat.{prefix}"]
    assert beats and beats[0]["key"]["payload"] == {"serverName": prefix}
    assert all(b["value"]["payload"]["ts_ms"] > 0 for b in beats)


BIG_ROWS = 30_000
"""One upstream transaction published in 60 fragments: enough for the stop to land between
them (the debezium encoding renders ~15k rows per CPU-second)."""


def _read_json(
    services: Settings, topics: list[str], until: Callable[[list[Any]], bool]
) -> list[Any]:
    """The records of `topics` (read_committed), as (topic, key, value) JSON, until `until`."""
    consumer = Consumer(
        {
            "bootstrap.servers": services.kafka.client_config()["bootstrap.servers"],
            "group.id": f"dbz-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    got: list[Any] = []
    try:
        consumer.subscribe(topics)
        deadline = time.monotonic() + 60
        while not until(got):
            assert time.monotonic() < deadline, f"{len(got)} records"
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None and msg.value() is not None:
                    got.append((msg.topic(), json.loads(msg.value())["payload"]))
    finally:
        consumer.close()
    return got


def test_a_transaction_in_fragments_across_a_restart_has_one_begin_and_one_end(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    setup = reader_setup
    prefix = f"test.dbzfrag{uuid.uuid4().hex[:8]}"
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        election=False,
        encoding="debezium",
        fragment_rows=500,
        flush_interval_s=0.05,
        debezium={"topic_prefix": prefix, "transaction_metadata": True},
    )
    fragment, checkpoint = fragment_key(setup.source), checkpoint_key(setup.source)

    def stored() -> list[tuple[bytes, ReaderCheckpoint]]:
        return checkpoints_by_key(setup.services, setup.checkpoints_topic)

    def past(end: tuple[str, int]) -> bool:
        return any(
            k == checkpoint and (r.position.file, r.position.offset) >= end for k, r in stored()
        )

    create_big_table(setup.server, setup.database)
    proc = start_reader_process(config, setup.source, "r0", tmp_path / "reader.log")
    try:
        wait_for(lambda: stored() or proc.poll() is not None, timeout=90, what="a checkpoint")
        insert_big_transaction(setup.server, setup.database, BIG_ROWS)
        end = binlog_end(setup.server)
        wait_for(
            lambda: any(k == fragment for k, _ in stored()) or proc.poll() is not None,
            timeout=90,
            interval=0.05,
            what="a fragment published",
        )
        # Killed between fragments: the BEGIN and the first rows are out, the END is not.
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not past(end), "the reader published the whole transaction before the kill"
        proc = start_reader_process(config, setup.source, "r1", tmp_path / "reader.log")
        wait_for(
            lambda: past(end) or proc.poll() is not None,
            timeout=120,
            what="the restarted reader to publish the transaction",
        )
        assert proc.poll() is None, "the restarted reader died"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        table_topic = f"{prefix}.{setup.database}.big"
        records = _read_json(
            setup.services,
            [table_topic, f"{prefix}.transaction"],
            lambda got: (
                sum(t == table_topic for t, _ in got) >= BIG_ROWS
                and any(p.get("status") == "END" for _, p in got)
            ),
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        admin = AdminClient(setup.services.kafka.client_config())
        mine = [t for t in admin.list_topics(timeout=15).topics if t.startswith(prefix)]
        for future in admin.delete_topics(mine, operation_timeout=10).values():
            future.result(15)
        del admin  # a failing test's traceback keeps this frame: the client must not live on
    rows = [p for t, p in records if t == table_topic]
    marks = [p for t, p in records if t != table_topic]
    assert [m["status"] for m in marks] == ["BEGIN", "END"], marks
    txn_id = marks[0]["id"]
    assert marks[1]["id"] == txn_id and marks[1]["event_count"] == BIG_ROWS
    assert sorted(r["after"]["id"] for r in rows) == list(range(1, BIG_ROWS + 1))
    # Each row once, in one transaction whose order runs on across the restart.
    assert {r["transaction"]["id"] for r in rows} == {txn_id}
    assert sorted(r["transaction"]["total_order"] for r in rows) == list(range(1, BIG_ROWS + 1))
