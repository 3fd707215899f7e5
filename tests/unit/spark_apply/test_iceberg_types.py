"""The MySQL → Iceberg type mapping (`iceberg_types`) and the schema changes the Iceberg sink
refuses (`iceberg_schema.evolve_table`), on a local SQL catalog (a sqlite file)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from rowbus.protocol.events import ColumnSchema, TableSchema
from rowbus.protocol.values import ZeroDate
from rowbus.routing.routes import Router
from rowbus.spark_apply.iceberg_schema import layout
from rowbus.spark_apply.iceberg_sink import IcebergTables
from rowbus.spark_apply.iceberg_types import (
    IcebergError,
    Kind,
    UnstorableColumnError,
    ZeroDateError,
    converter,
    kind_of,
)
from rowbus.spark_apply.settings import IcebergSettings


@pytest.mark.parametrize(
    ("column", "kind"),
    [
        (ColumnSchema("c", "tinyint", unsigned=True), Kind("int")),
        (ColumnSchema("c", "mediumint", unsigned=True), Kind("int")),
        (ColumnSchema("c", "year"), Kind("int")),
        (ColumnSchema("c", "int"), Kind("int")),
        (ColumnSchema("c", "int", unsigned=True), Kind("long")),
        (ColumnSchema("c", "bigint"), Kind("long")),
        (ColumnSchema("c", "bigint", unsigned=True), Kind("decimal", 20, 0)),
        (ColumnSchema("c", "bit", length=64), Kind("decimal", 20, 0)),
        (ColumnSchema("c", "bit", length=1), Kind("long")),
        (ColumnSchema("c", "float"), Kind("float")),
        (ColumnSchema("c", "decimal", precision=38, scale=10), Kind("decimal", 38, 10)),
        (ColumnSchema("c", "set", elements=("a",)), Kind("string")),
        (ColumnSchema("c", "json"), Kind("string")),
        (ColumnSchema("c", "geometry"), Kind("binary")),
        (ColumnSchema("c", "datetime", fsp=6), Kind("timestamp")),
        (ColumnSchema("c", "timestamp"), Kind("timestamptz")),
        (ColumnSchema("c", "time", fsp=6), Kind("long")),
    ],
)
def test_every_protocol_type_maps_to_one_exact_iceberg_type(
    column: ColumnSchema, kind: Kind
) -> None:
    assert kind_of("db.t", column) == kind


def test_a_decimal_beyond_precision_38_is_refused_in_one_line_naming_table_and_column() -> None:
    with pytest.raises(UnstorableColumnError) as refused:
        kind_of("db.t", ColumnSchema("d", "decimal", precision=65, scale=30))
    text = str(refused.value)
    assert "db.t.d is DECIMAL(65,30)" in text and "DECIMAL(38,30)" in text and "\n" not in text


def test_values_convert_exactly_and_zero_dates_are_refused_unless_null_is_chosen() -> None:
    time = ColumnSchema("t", "time", fsp=6)
    assert converter("db.t", time, Kind("long"), False)(dt.timedelta(microseconds=-250000)) == (
        -250000
    )
    members = ColumnSchema("s", "set", elements=("z", "a", "m"))
    assert converter("db.t", members, Kind("string"), False)(frozenset({"a", "z"})) == "z,a"
    unsigned = ColumnSchema("u", "bigint", unsigned=True)
    assert converter("db.t", unsigned, Kind("decimal", 20, 0), False)(2**64 - 1) == Decimal(
        2**64 - 1
    )
    date = ColumnSchema("d", "date")
    with pytest.raises(ZeroDateError, match=r"db\.t\.d holds the zero date '0000-00-00'"):
        converter("db.t", date, Kind("date"), False)(ZeroDate("0000-00-00"))
    assert converter("db.t", date, Kind("date"), True)(ZeroDate("0000-00-00")) is None


def _tables(tmp_path: Path) -> IcebergTables:
    settings = IcebergSettings(
        catalog={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/c.db",
            "warehouse": str(tmp_path / "wh"),
        },
        forms=("current",),
    )
    return IcebergTables(settings, Router((), "identity"), lambda _: None, "job").start()


def _schema(*columns: ColumnSchema, key: tuple[str, ...] = ("id",)) -> TableSchema:
    return TableSchema("db", "t", (ColumnSchema("id", "int", nullable=False), *columns), key)


def test_schema_changes_iceberg_cannot_express_are_refused_before_any_is_applied(
    tmp_path: Path,
) -> None:
    tables = _tables(tmp_path)
    router = Router((), "identity")
    first = _schema(ColumnSchema("a", "int"), ColumnSchema("b", "varchar"))
    lay = layout(router.projection(first), first, False)  # type: ignore[arg-type]
    table = tables._table(lay, changelog=False)
    refused = [
        (_schema(ColumnSchema("a", "varchar"), ColumnSchema("b", "varchar")), "from int to string"),
        (_schema(ColumnSchema("a", "int"), ColumnSchema("c", "varchar")), "may be a RENAME"),
        (
            _schema(  # (a key on existing columns is applied: test_iceberg_schema.py)
                ColumnSchema("a", "int"),
                ColumnSchema("b", "varchar"),
                ColumnSchema("c", "int", nullable=False),
                key=("id", "c"),
            ),
            "primary key would become",
        ),
    ]
    for schema, reason in refused:
        with pytest.raises(IcebergError, match=reason):
            tables.evolve(schema)
        assert tables._catalog.load_table(("db", "t")).schema() == table.schema()
    widened = _schema(ColumnSchema("a", "bigint"), ColumnSchema("n", "double"))
    with pytest.raises(IcebergError, match="may be a RENAME"):
        tables.evolve(widened)  # b goes while n comes: refused whole
    tables.evolve(
        _schema(
            ColumnSchema("a", "bigint"), ColumnSchema("b", "varchar"), ColumnSchema("n", "double")
        )
    )
    fields = [
        (f.name, str(f.field_type)) for f in tables._catalog.load_table(("db", "t")).schema().fields
    ]
    assert fields == [("id", "int"), ("a", "long"), ("b", "string"), ("n", "double")]


def test_a_step_already_committed_is_skipped_and_a_table_with_rows_is_known(
    tmp_path: Path,
) -> None:
    """`write_step` twice with the same (batch, step): the second finds the first's snapshot
    summary and writes nothing (the change log would hold every event twice otherwise);
    `holds_rows` (what a snapshot marker's refusal asks) turns true with the first row."""
    from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef
    from rowbus.spark_apply.planner import Envelope

    table = _schema(ColumnSchema("a", "int"))
    settings = IcebergSettings(
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)},
        forms=("current", "changelog"),
    )
    schemas = {table.schema_id: table}
    tables = IcebergTables(settings, Router((), "identity"), schemas.get, "job").start()
    target = Router((), "identity").target("db", "t")
    assert target is not None
    assert not tables.holds_rows(target)

    def row(offset: int, key: int, value: int) -> Envelope:
        change = RowChange(
            source="s1",
            ts=offset,
            op=Op.INSERT,
            schema="db",
            table="t",
            schema_id=table.schema_id,
            primary_key=("id",),
            before=None,
            after=(key, value),
            txn=TxnRef(f"0-1-{offset}", 0, 1),
            position=BinlogPosition("b.000001", 4 + offset),
        )
        return Envelope("topic", 0, offset, change)

    step = [row(0, 1, 10), row(1, 2, 20)]
    assert tables.write_step(7, 0, step) == 4  # two keys, two events
    assert tables.holds_rows(target)
    assert tables.write_step(7, 0, step) == 0
    # Another writer (a compaction, say) commits to both tables in between: the sink's next
    # commit meets a newer table than the one it holds, and is tried again, not lost.
    other = IcebergTables(settings, Router((), "identity"), schemas.get, "other").start()
    for name in ("t", "t_changelog"):
        theirs = other._catalog.load_table(("db", name))
        theirs.overwrite(theirs.scan().to_arrow())
    assert tables.write_step(7, 1, [row(2, 1, 11)]) == 2
    log = tables._catalog.load_table(("db", "t_changelog")).scan().to_arrow()
    assert sorted(log.column("_offset").to_pylist()) == [0, 1, 2]
    current = tables._catalog.load_table(("db", "t")).scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["a"]) for r in current) == [(1, 11), (2, 20)]


def test_truncate_empties_the_current_table_and_logs_one_event_even_when_replayed(
    tmp_path: Path,
) -> None:
    from rowbus.protocol.ddl import DdlKind
    from rowbus.protocol.events import BinlogPosition, DdlChange, Op, RowChange, TxnRef
    from rowbus.spark_apply.planner import Envelope

    table = _schema(ColumnSchema("a", "int"))
    settings = IcebergSettings(
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)},
        forms=("current", "changelog"),
    )
    schemas = {table.schema_id: table}
    tables = IcebergTables(settings, Router((), "identity"), schemas.get, "job").start()
    insert = RowChange(
        source="s1",
        ts=1,
        op=Op.INSERT,
        schema="db",
        table="t",
        schema_id=table.schema_id,
        primary_key=("id",),
        before=None,
        after=(1, 10),
        txn=TxnRef("0-1-1", 0, 1),
        position=BinlogPosition("b.000001", 4),
    )
    tables.write_step(3, 0, [Envelope("topic", 0, 0, insert)])
    truncate = DdlChange(
        source="s1",
        ts=2,
        schema="db",
        table="t",
        statement="TRUNCATE TABLE t",
        table_schema=table,
        position=BinlogPosition("b.000001", 400),
        kind=DdlKind.TRUNCATE_TABLE,
    )
    env = Envelope("topic", 0, 1, truncate)
    tables.truncate(env, 3, 0)  # the step's DDL part: after its rows, same (batch, step)
    tables.truncate(env, 3, 0)  # replayed: found, skipped
    catalog = tables._catalog
    assert catalog.load_table(("db", "t")).scan().to_arrow().num_rows == 0
    log = catalog.load_table(("db", "t_changelog")).scan().to_arrow()
    assert sorted(log.column("_op").to_pylist()) == ["insert", "truncate"]


def test_expired_snapshots_leave_every_step_a_replay_can_need(tmp_path: Path) -> None:
    """Snapshot expiry keeps this job's commits of the last `keep` batches (what a replay
    looks for) and the rows; older snapshots go."""
    from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef
    from rowbus.spark_apply.planner import Envelope

    table = _schema(ColumnSchema("a", "int"))
    settings = IcebergSettings(
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)},
        forms=("changelog",),
    )
    schemas = {table.schema_id: table}
    tables = IcebergTables(settings, Router((), "identity"), schemas.get, "job").start()

    def step(batch: int) -> list[Envelope]:
        change = RowChange(
            source="s1",
            ts=batch,
            op=Op.INSERT,
            schema="db",
            table="t",
            schema_id=table.schema_id,
            primary_key=("id",),
            before=None,
            after=(batch, batch),
            txn=TxnRef(f"0-1-{batch}", 0, 1),
            position=BinlogPosition("b.000001", 4 + batch),
        )
        return [Envelope("topic", 0, batch, change)]

    for batch in range(4):
        tables.write_step(batch, 0, step(batch))
    assert tables.expire(3, keep=1) == 2
    log = tables._catalog.load_table(("db", "t_changelog"))
    batches = [s.summary.additional_properties["rowbus.batch"] for s in log.metadata.snapshots]
    assert batches == ["2", "3"]
    assert tables.write_step(3, 0, step(3)) == 0  # a replay of batch 3 still finds it
    assert sorted(log.scan().to_arrow().column("_offset").to_pylist()) == [0, 1, 2, 3]
