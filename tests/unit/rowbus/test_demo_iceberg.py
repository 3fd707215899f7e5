"""`rowbus demo`'s Iceberg part (`rowbus.demo_iceberg`) without services: the configuration it
writes routes the two tables into a fresh local catalog, and its query reads the change logs
the sink writes (per operation, the first table's newest changes first)."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from rowbus.demo_iceberg import TABLES, IcebergDemo, changes, query_lines
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    Op,
    RowChange,
    TableSchema,
    TxnRef,
)
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.iceberg_sink import IcebergTables
from rowbus.spark_apply.planner import Envelope


def _demo(tmp_path: Path) -> IcebergDemo:
    config = tmp_path / "rowbus-demo.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sources": [{"name": "source1", "port": 1}, {"name": "source2", "port": 2}],
                "apply": {"job": "rowbus-demo"},
            }
        )
    )
    return IcebergDemo(config, tmp_path, lambda *_: 0, lambda _: None, out=io.StringIO())


def test_the_configuration_routes_two_tables_into_a_fresh_local_catalog(tmp_path: Path) -> None:
    stale = tmp_path / "iceberg" / "warehouse" / "old.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an earlier run's table")
    settings = _demo(tmp_path)._settings()
    apply = settings.apply
    assert (apply.job, apply.sink_kind, apply.sources) == (
        "rowbus-demo-iceberg",
        "iceberg",
        ("source1",),
    )
    assert [r.match for r in apply.routes] == [f"demo_w2_source1.{t}" for t in TABLES]
    assert apply.unrouted == "skip"
    assert apply.iceberg.forms == ("current", "changelog")
    assert apply.iceberg.catalog["uri"] == f"sqlite:///{tmp_path / 'iceberg' / 'catalog.db'}"
    assert not stale.exists()
    assert IcebergDemo.schema(settings) == "demo_w2_source1"


def test_the_query_counts_events_per_operation_and_lists_the_newest_first(
    tmp_path: Path,
) -> None:
    settings = _demo(tmp_path)._settings()
    columns = (ColumnSchema("id", "bigint", nullable=False), ColumnSchema("qty", "int"))
    schemas = {t: TableSchema("demo_w2_source1", t, columns, ("id",)) for t in TABLES}
    by_id = {s.schema_id: s for s in schemas.values()}
    router = Router([RouteSettings(match=f"demo_w2_source1.{t}") for t in TABLES], "skip")
    tables = IcebergTables(settings.apply.iceberg, router, by_id.get, "j").start()
    events = []
    for n, (table, op, before, after) in enumerate(
        [
            ("t0", Op.INSERT, None, (1, 10)),
            ("t1", Op.INSERT, None, (1, 5)),
            ("t0", Op.INSERT, None, (2, 20)),
            ("t0", Op.UPDATE, (1, 10), (1, 11)),
            ("t0", Op.DELETE, (2, 20), None),
            ("t1", Op.DELETE, (1, 5), None),
        ]
    ):
        event = RowChange(
            source="source1",
            ts=(1_700_000_000_000 + n * 1000) << 16,
            op=op,
            schema="demo_w2_source1",
            table=table,
            schema_id=schemas[table].schema_id,
            primary_key=("id",),
            before=before,
            after=after,
            txn=TxnRef(f"1-1-{n}", 0, 1),
            position=BinlogPosition("bin.000001", 4 + n),
        )
        events.append(Envelope("topic", 0, n, event))
    tables.write_step(0, 0, events)
    ops, last = changes(settings, "demo_w2_source1")
    assert ops == {"insert": 3, "update": 1, "delete": 2}
    assert [(r["_op"], r["after_id"], r["before_id"]) for r in last] == [
        ("delete", None, 2),
        ("update", 1, 1),
        ("insert", 2, None),
        ("insert", 1, None),
    ]
    text = query_lines("demo_w2_source1", ops, last).splitlines()
    assert text[0].endswith("by _op: delete 2, insert 3, update 1")
    assert "last 4 changes of demo_w2_source1.t0" in text[1]
    assert text[2].split()[0] == "delete" and text[2].endswith("id=2 qty=20")
