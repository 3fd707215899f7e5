"""The batcher of the debezium encoding: where each record goes (topics, keys, partitions),
tombstones after deletes, transaction metadata around a transaction, watermarks as heartbeats,
snapshot markers left out."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from rowbus.producer.assembler import DdlItem, RowItem, Transaction
from rowbus.producer.batch import Batcher
from rowbus.producer.debezium import DebeziumRecords
from rowbus.producer.records import Topics
from rowbus.producer.settings import ReaderSettings
from rowbus.protocol.codec import ENCODING_HEADER
from rowbus.protocol.ddl import parse_ddl
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    MarkerMode,
    Op,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import Partitioner, java_partition

T = TableSchema("db", "t", (ColumnSchema("id", "int"), ColumnSchema("v", "varchar")), ("id",))
U = TableSchema("db", "u", (ColumnSchema("id", "int"),), ("id",))
POS = BinlogPosition("bin.1", 100, "0-1-1")


def batcher(**options: Any) -> tuple[Batcher, dict[str, int]]:
    created: dict[str, int] = {}

    def partitions(topic: str) -> int:
        created[topic] = 4
        return 4

    records = DebeziumRecords(
        Topics("src", "rowbus.{source}", partitions, Partitioner),
        "schemas",
        DebeziumRenderer(DebeziumOptions("dbz", **options), server_id=1),
        wall=lambda: 1_800_000_000.5,
    )
    return Batcher("src", HybridClock(), records, lambda item: T), created


def txn(*changes: RowItem | DdlItem) -> Transaction:
    return Transaction(
        "0-1-1", "0-1-1", BinlogPosition("bin.1", 200, "0-1-1"), 1_700_000_000, list(changes)
    )


def records(b: Batcher) -> list[tuple[str, int | None, Any, Any]]:
    out = []
    for topic, partition, key, value, headers in b.take().records:
        if topic == "schemas":
            continue
        if topic.startswith("dbz"):
            assert headers == [(ENCODING_HEADER, b"debezium")]
        parsed = None if value is None else json.loads(value)["payload"]
        out.append((topic, partition, None if key is None else json.loads(key)["payload"], parsed))
    return out


def test_rows_go_to_table_topics_keyed_as_debezium_and_deletes_leave_a_tombstone() -> None:
    b, created = batcher()
    b.add(
        txn(
            RowItem(Op.INSERT, T, None, (1, "a"), POS),
            RowItem(Op.UPDATE, T, (1, "a"), (1, "b"), POS),
            RowItem(Op.DELETE, T, (1, "b"), None, POS),
        ),
        now=0.0,
    )
    got = records(b)
    assert [(t, k, v and v["op"]) for t, _, k, v in got] == [
        ("dbz.db.t", {"id": 1}, "c"),
        ("dbz.db.t", {"id": 1}, "u"),
        ("dbz.db.t", {"id": 1}, "d"),
        ("dbz.db.t", {"id": 1}, None),
    ]
    partitions = {p for _, p, _, _ in got}
    assert len(partitions) == 1  # one key, one partition: Kafka's default partitioner's
    assert created["dbz.db.t"] == 4
    assert got[0][3]["ts_ms"] == 1_800_000_000_500
    assert got[0][3]["source"]["ts_ms"] == 1_700_000_000_000


def test_partition_is_kafkas_default_for_the_key_bytes() -> None:
    b, _ = batcher()
    b.add(txn(RowItem(Op.INSERT, T, None, (42, "a"), POS)), now=0.0)
    (topic, partition, key, _, _), *_ = [r for r in b.take().records if r[0] != "schemas"]
    assert topic == "dbz.db.t" and key is not None
    assert partition == java_partition(key, 4)


def test_a_key_change_is_delete_tombstone_create() -> None:
    b, _ = batcher()
    b.add(txn(RowItem(Op.UPDATE, T, (1, "a"), (2, "a"), POS)), now=0.0)
    got = records(b)
    assert [(k, v and v["op"]) for _, _, k, v in got] == [
        ({"id": 1}, "d"),
        ({"id": 1}, None),
        ({"id": 2}, "c"),
    ]


def test_transaction_metadata_brackets_each_transaction() -> None:
    b, _ = batcher(transaction_metadata=True)
    b.add(
        txn(
            RowItem(Op.INSERT, T, None, (1, "a"), POS),
            RowItem(Op.INSERT, U, None, (1,), POS),
            RowItem(Op.INSERT, T, None, (2, "a"), POS),
        ),
        now=0.0,
    )
    got = records(b)
    assert [t for t, *_ in got] == [
        "dbz.transaction", "dbz.db.t", "dbz.db.u", "dbz.db.t", "dbz.transaction",
    ]  # fmt: skip
    begin, end = got[0][3], got[-1][3]
    assert (begin["status"], begin["id"], begin["event_count"]) == ("BEGIN", "0-1-1", None)
    assert (end["status"], end["event_count"]) == ("END", 3)
    assert end["data_collections"] == [
        {"data_collection": "db.t", "event_count": 2},
        {"data_collection": "db.u", "event_count": 1},
    ]
    orders = [v["transaction"] for _, _, _, v in got[1:-1]]
    assert [(o["total_order"], o["data_collection_order"]) for o in orders] == [
        (1, 1),
        (2, 1),
        (3, 2),
    ]
    assert [v["source"]["row"] for _, _, _, v in got[1:-1]] == [0, 1, 2]


def test_watermarks_become_one_heartbeat_and_markers_nothing() -> None:
    b, _ = batcher()
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a"), POS)), now=0.0)
    b.add_resolved()
    marker = SnapshotBegin(
        source="src", ts=b.tick(0.0), schema="db", table="t", snapshot="s:1:db.t",
        mode=MarkerMode.REPLACE, position=POS, txn=TxnRef("s", 0),
    )  # fmt: skip
    b.add_marker(marker, 0.0)
    got = records(b)
    beats = [(t, k, v) for t, _, k, v in got if t.startswith("__debezium-heartbeat")]
    assert beats == [
        ("__debezium-heartbeat.dbz", {"serverName": "dbz"}, {"ts_ms": 1_700_000_000_000})
    ]
    assert len(got) == 2


def test_ddl_is_one_schema_change_record() -> None:
    b, _ = batcher()
    statement = "ALTER TABLE t ADD x INT"
    b.add(txn(DdlItem(statement, "db", parse_ddl(statement, "db"), POS)), now=0.0)
    got = records(b)
    assert len(got) == 1
    topic, partition, key, value = got[0]
    assert (topic, partition, key) == ("dbz", 0, {"databaseName": "db"})
    assert value["ddl"] == statement


def test_rowbus_topic_names_on_request() -> None:
    created: dict[str, int] = {}
    topics = Topics("src", "rowbus.{source}", lambda t: created.setdefault(t, 2), Partitioner)
    renderer = DebeziumRenderer(DebeziumOptions("dbz"))
    dbz = DebeziumRecords(topics, "schemas", renderer, debezium_topics=False)
    b = Batcher("src", HybridClock(), dbz, lambda item: T)
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a"), POS)), now=0.0)
    assert [t for t, *_ in records(b)] == ["rowbus.src"]


def test_source_ts_ms_is_the_commit_time_even_when_the_clock_runs_ahead() -> None:
    b, _ = batcher()
    b.add_heartbeat("r", POS, 0, now=1_800_000_000.0)  # the clock jumps to the wall clock
    b.add(txn(RowItem(Op.INSERT, T, None, (1, "a"), POS)), now=0.0)
    rows = [v for t, _, _, v in records(b) if t == "dbz.db.t"]
    assert rows[0]["source"]["ts_ms"] == 1_700_000_000_000


def test_debezium_settings_without_the_debezium_encoding_are_refused_in_one_line() -> None:
    import pytest
    from pydantic import ValidationError

    from rowbus.producer.settings import ReaderSettings

    with pytest.raises(
        ValidationError, match=r"reader\.debezium is set but reader\.encoding is json"
    ):
        ReaderSettings(encoding="json", debezium={"topic_prefix": "x"})  # type: ignore[arg-type]
    ok = ReaderSettings(encoding="debezium", debezium={"topic_prefix": "x"})  # type: ignore[arg-type]
    assert ok.debezium.topic_prefix == "x"


def test_a_whole_written_configuration_loads_and_debezium_options_need_the_encoding() -> None:
    """The demo writes its settings out whole, defaults included: `reader.debezium` at its
    defaults must load with the native encoding (`make demo` stopped on it), while an option
    changed without `encoding: debezium` is refused in one line naming both settings."""
    dumped = json.loads(ReaderSettings().model_dump_json())
    assert "debezium" in dumped
    assert ReaderSettings.model_validate(dumped).encoding == "protobuf"
    changed = {**dumped, "debezium": {**dumped["debezium"], "topic_prefix": "shop"}}
    with pytest.raises(pydantic.ValidationError, match=r"set reader\.encoding: debezium"):
        ReaderSettings.model_validate(changed)
    assert ReaderSettings.model_validate({**changed, "encoding": "debezium"}).debezium.schemas


def _marker(b: Batcher, table: str, rows: int | None) -> SnapshotBegin | SnapshotEnd:
    common: dict[str, Any] = {
        "source": "src", "ts": b.tick(0.0), "schema": "db", "table": table, "snapshot": "s",
        "mode": MarkerMode.REPLACE, "position": POS, "txn": TxnRef("s", 0),
    }  # fmt: skip
    return SnapshotBegin(**common) if rows is None else SnapshotEnd(**common, rows=rows)


def test_snapshot_rows_are_all_debeziums_and_marked_first_and_last_as_debezium_marks_them() -> None:
    b, _ = batcher()
    for table, rows in ((T, [(1, "a"), (2, "b"), (3, "c")]), (U, [(1,)])):
        b.add_marker(_marker(b, table.table, None), 0.0)
        b.add_snapshot(table, rows, "s:1", 0, POS, 0.0)
        b.add_marker(_marker(b, table.table, len(rows)), 0.0)
    got = records(b)  # every value parses as Debezium's JSON (none in rowbus's protobuf)
    assert [(t, v["op"], v["source"]["snapshot"]) for t, _, _, v in got] == [
        ("dbz.db.t", "r", "first"),
        ("dbz.db.t", "r", "true"),
        ("dbz.db.t", "r", "last_in_data_collection"),
        ("dbz.db.u", "r", "last_in_data_collection"),  # one row: last wins over first (Debezium)
    ]
    assert [v["after"]["id"] for _, _, _, v in got] == [1, 2, 3, 1]


def test_a_snapshot_row_already_produced_keeps_its_mark() -> None:
    b, _ = batcher()
    b.add_marker(_marker(b, "t", None), 0.0)
    b.add_snapshot(T, [(1, "a"), (2, "b")], "s:1", 0, POS, 0.0)
    b.batch.sent = len(b.batch.records)  # the reader produced them into its Kafka transaction
    b.add_marker(_marker(b, "t", 2), 0.0)
    assert [v["source"]["snapshot"] for _, _, _, v in records(b)] == ["first", "true"]
