"""The Iceberg sink's schema changes (`iceberg_schema.evolve_table` through
`iceberg_sink.IcebergTables` and `IcebergRows.ddl`) on a local SQL catalog (a sqlite file): what
each DDL kind of the schema-change matrix does to an Iceberg table that holds rows, and each kind
Iceberg cannot express refused in one line with the table left as it was (nothing applied partly).
The whole matrix through the reader and Spark: tests/integration/schema_changes/test_matrix.py."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from rowbus.merge.state import Envelope
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import BinlogPosition, ColumnSchema, DdlChange, TableSchema
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.exceptions import ApplyError, BadEventError
from rowbus.spark_apply.iceberg_schema import layout, schema_of
from rowbus.spark_apply.iceberg_sink import IcebergRows, IcebergTables
from rowbus.spark_apply.settings import IcebergSettings
from rowbus.spark_apply.snapshots import SeenSets

ID = ColumnSchema("id", "int", nullable=False)


def _table(*columns: ColumnSchema, key: tuple[str, ...] = ("id",), name: str = "t") -> TableSchema:
    return TableSchema("db", name, (ID, *columns), key)


class Sink:
    """An `IcebergTables` on a sqlite catalog, both forms, the tables ``db.t*`` and ``db.u*``
    routed (``db.elsewhere`` not)."""

    def __init__(self, tmp_path: Path) -> None:
        settings = IcebergSettings(
            catalog={
                "type": "sql",
                "uri": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "wh"),
            },
            forms=("current", "changelog"),
        )
        self.router = Router(
            [RouteSettings(match="db.t*"), RouteSettings(match="db.u*")], unrouted="skip"
        )
        self.tables = IcebergTables(settings, self.router, lambda _: None, "j").start()
        self.catalog = self.tables._catalog
        self.known: list[TableSchema] = []
        self.rows = IcebergRows(self.tables, self.router, SeenSets(self.router), lambda: self.known)

    def create(self, schema: TableSchema, rows: list[dict[str, Any]], docs: bool = True) -> None:
        """Both forms' tables of `schema`, the current state holding `rows`; without `docs`:
        fields with no MySQL definition, as a table written before they were kept."""
        proj = self.router.projection(schema)
        assert proj is not None
        lay = layout(proj, schema, False)
        self.catalog.create_namespace_if_not_exists("db")
        for changelog in (False, True):
            name = schema.table + ("_changelog" if changelog else "")
            iceberg = schema_of(lay, changelog)
            if not docs:
                from pyiceberg.schema import Schema

                fields = [f.model_copy(update={"doc": None}) for f in iceberg.fields]
                iceberg = Schema(*fields, identifier_field_ids=iceberg.identifier_field_ids)
            table = self.catalog.create_table(("db", name), schema=iceberg)
            if not changelog:
                import pyarrow as pa

                arrow = table.schema().as_arrow()
                table.append(pa.Table.from_pylist(rows, schema=arrow))
        self.known.append(schema)

    def scan(self, name: str = "t") -> list[dict[str, Any]]:
        rows = self.catalog.load_table(("db", name)).scan().to_arrow().to_pylist()
        return sorted(rows, key=lambda r: r["id"])

    def fields(self, name: str = "t") -> list[tuple[str, str, bool]]:
        schema = self.catalog.load_table(("db", name)).schema()
        return [(f.name, str(f.field_type), f.required) for f in schema.fields]

    def ddl(
        self,
        statement: str,
        kind: DdlKind,
        after: TableSchema | None,
        sql_mode: str | None = "STRICT_TRANS_TABLES",
    ) -> None:
        ev = DdlChange(
            source="s",
            ts=1,
            schema="db",
            table=after.table if after else None,
            statement=statement,
            table_schema=after,
            position=BinlogPosition("bin.000001", 4),
            kind=kind,
            sql_mode=sql_mode,
        )
        self.rows.ddl(Envelope("topic", 0, 7, ev), 1, 0)


@pytest.fixture
def sink(tmp_path: Path) -> Sink:
    return Sink(tmp_path)


A = ColumnSchema("a", "int")


def test_rename_column_keeps_the_values_and_the_change_log_renames_both_images(
    sink: Sink,
) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    after = _table(ColumnSchema("z", "bigint", nullable=False, default="0"))
    sink.ddl("ALTER TABLE t CHANGE a z BIGINT NOT NULL DEFAULT 0", DdlKind.ALTER_TABLE, after)
    assert sink.scan() == [{"id": 1, "z": 10}]
    assert sink.fields()[1] == ("z", "long", False)
    log = [n for n, _, _ in sink.fields("t_changelog")]
    assert "before_z" in log and "after_z" in log and "after_a" not in log
    # A replay of the same DDL finds nothing to do.
    sink.ddl("ALTER TABLE t CHANGE a z BIGINT NOT NULL DEFAULT 0", DdlKind.ALTER_TABLE, after)
    assert sink.scan() == [{"id": 1, "z": 10}]


def test_an_added_column_reads_its_constant_default_in_the_rows_before_it(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    after = _table(
        A,
        ColumnSchema("d", "int", nullable=False, default="7"),
        ColumnSchema("s", "varchar", length=5, default="'it''s'"),
        ColumnSchema("p", "decimal", precision=6, scale=2, default="1.50"),
        ColumnSchema("n", "int", default="NULL"),
    )
    sink.ddl("ALTER TABLE t ADD d …", DdlKind.ALTER_TABLE, after)
    assert sink.scan() == [{"id": 1, "a": 10, "d": 7, "s": "it's", "p": Decimal("1.50"), "n": None}]
    # The change log's images have no value from before the column: NULL, no default.
    log = sink.catalog.load_table(("db", "t_changelog")).schema()
    assert log.find_field("after_d").initial_default is None


def test_a_new_primary_key_moves_the_identifier_fields(sink: Sink) -> None:
    k = ColumnSchema("k", "int", nullable=False)
    sink.create(_table(k), [{"id": 1, "k": 10}])
    after = TableSchema("db", "t", (ID, k), ("k",))
    sink.ddl("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (k)", DdlKind.ALTER_TABLE, after)
    schema = sink.catalog.load_table(("db", "t")).schema()
    assert schema.identifier_field_names() == {"k"}
    assert sink.scan() == [{"id": 1, "k": 10}]


def test_rename_table_renames_both_forms_and_drop_table_drops_the_current_state(
    sink: Sink,
) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    sink.ddl("RENAME TABLE t TO t2", DdlKind.RENAME_TABLE, _table(A, name="t2"))
    assert sink.scan("t2") == [{"id": 1, "a": 10}]
    assert sink.catalog.table_exists(("db", "t2_changelog"))
    assert not sink.catalog.table_exists(("db", "t"))
    sink.ddl("RENAME TABLE t TO t2", DdlKind.RENAME_TABLE, _table(A, name="t2"))  # a replay
    assert sink.scan("t2") == [{"id": 1, "a": 10}]
    sink.ddl("DROP TABLE t2", DdlKind.DROP_TABLE, None)
    assert not sink.catalog.table_exists(("db", "t2"))
    assert sink.catalog.table_exists(("db", "t2_changelog"))  # the history stays


def test_drop_database_drops_the_current_state_of_its_tables(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    sink.ddl("DROP DATABASE db", DdlKind.DROP_DATABASE, None)
    assert not sink.catalog.table_exists(("db", "t"))
    assert sink.catalog.table_exists(("db", "t_changelog"))


def _refused(
    sink: Sink,
    statement: str,
    kind: DdlKind,
    after: TableSchema | None,
    sql_mode: str | None = "STRICT_TRANS_TABLES",
) -> str:
    """`statement` refused in one line, both tables as they were."""
    before = {n: sink.catalog.load_table(("db", n)).metadata for n in ("t", "t_changelog")}
    with pytest.raises(ApplyError) as refused:
        sink.ddl(statement, kind, after, sql_mode)
    message = str(refused.value)
    assert "\n" not in message
    for n, metadata in before.items():
        now = sink.catalog.load_table(("db", n)).metadata
        assert now.current_schema_id == metadata.current_schema_id, n
        assert now.schemas == metadata.schemas, n
    return message


def test_a_new_decimal_scale_is_refused_in_one_line(sink: Sink) -> None:
    p = ColumnSchema("p", "decimal", precision=5, scale=2)
    sink.create(_table(A, p), [{"id": 1, "a": 5, "p": Decimal("1.25")}])
    after = _table(ColumnSchema("a", "bigint"), ColumnSchema("p", "decimal", precision=12, scale=4))
    message = _refused(sink, "ALTER TABLE t MODIFY …", DdlKind.ALTER_TABLE, after)
    assert "db.t.p would change from decimal(5, 2) to decimal(12, 4)" in message
    assert "route the table out" in message
    assert sink.fields()[1] == ("a", "int", False)  # the widening beside it not applied


def test_a_string_becoming_a_number_is_refused_in_one_line(sink: Sink) -> None:
    v = ColumnSchema("v", "varchar", length=10)
    sink.create(_table(v), [{"id": 1, "v": "12abc"}])
    message = _refused(
        sink, "ALTER TABLE t MODIFY v INT", DdlKind.ALTER_TABLE, _table(ColumnSchema("v", "int"))
    )
    assert "db.t.v would change from string to int" in message


def test_an_added_column_with_an_expression_default_is_refused_in_one_line(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    ts = ColumnSchema("at", "timestamp", fsp=0, nullable=False, default="current_timestamp()")
    message = _refused(sink, "ALTER TABLE t ADD at …", DdlKind.ALTER_TABLE, _table(A, ts))
    assert "db.t.at is added with DEFAULT current_timestamp()" in message


def test_a_column_gone_and_one_come_without_a_rename_is_refused_in_one_line(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    after = _table(ColumnSchema("b", "int"))
    message = _refused(sink, "ALTER TABLE t DROP a, ADD b INT", DdlKind.ALTER_TABLE, after)
    assert "columns ['a'] would go and ['b'] come" in message


def test_a_primary_key_on_a_column_added_with_it_is_refused_in_one_line(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    k = ColumnSchema("k", "int", nullable=False, default="0")
    after = TableSchema("db", "t", (ID, A, k), ("k",))
    message = _refused(sink, "ALTER TABLE t ADD k …, …", DdlKind.ALTER_TABLE, after)
    assert "db.t: the primary key would become ['k']" in message


def test_a_rename_out_of_the_routes_is_refused_in_one_line(sink: Sink) -> None:
    sink.create(_table(A), [{"id": 1, "a": 10}])
    with pytest.raises(BadEventError) as refused:
        sink.ddl("RENAME TABLE t TO elsewhere", DdlKind.RENAME_TABLE, None)
    assert "RENAME of db.t to db.elsewhere" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert sink.scan() == [{"id": 1, "a": 10}]


def test_a_primary_key_iceberg_cannot_take_is_refused_in_one_line(sink: Sink) -> None:
    """Iceberg's own refusal (no identifier field of a floating type), raised inside the
    schema update: one line, nothing of the update committed."""
    f = ColumnSchema("f", "double", nullable=False)
    sink.create(_table(f), [{"id": 1, "f": 0.5}])
    after = TableSchema("db", "t", (ID, f), ("f",))
    message = _refused(sink, "ALTER TABLE t … PRIMARY KEY (f)", DdlKind.ALTER_TABLE, after)
    assert "db.t: Iceberg refused the schema change (" in message
    assert "must not be float or double" in message
    assert sink.catalog.load_table(("db", "t")).schema().identifier_field_names() == {"id"}


# -- a narrowing ALTER in a lenient session (the source cuts its rows without row events) --

LENIENT = "NO_ENGINE_SUBSTITUTION"
V10 = ColumnSchema("v", "varchar", length=10, charset="utf8mb4")
V3 = ColumnSchema("v", "varchar", length=3, charset="utf8mb4")


@pytest.mark.parametrize(
    ("old", "new", "value", "says"),
    [
        (V10, V3, "abcdefgh", "db.t.v would narrow from varchar(10) to varchar(3)"),
        (A, ColumnSchema("a", "tinyint", unsigned=True), 300, "from int to tinyint unsigned"),
        (
            ColumnSchema("a", "smallint", unsigned=True),
            ColumnSchema("a", "smallint"),
            60000,
            "from smallint unsigned to smallint",
        ),
        (
            ColumnSchema("a", "decimal", precision=10, scale=2),
            ColumnSchema("a", "decimal", precision=5, scale=2),
            Decimal("12345.67"),
            "from decimal(10,2) to decimal(5,2)",
        ),
        (
            ColumnSchema("a", "text", charset="utf8mb4"),
            ColumnSchema("a", "tinytext", charset="utf8mb4"),
            "x" * 300,
            "from text to tinytext",
        ),
    ],
    ids=["varchar", "int-range", "unsigned-to-signed", "decimal", "text"],
)
def test_a_narrowing_in_a_lenient_session_is_refused_in_one_line(
    sink: Sink, old: ColumnSchema, new: ColumnSchema, value: Any, says: str
) -> None:
    sink.create(_table(old), [{"id": 1, old.name: value}])
    message = _refused(sink, "ALTER TABLE t MODIFY …", DdlKind.ALTER_TABLE, _table(new), LENIENT)
    assert says in message
    assert "run the ALTER in a STRICT session" in message
    assert "drop the Iceberg table and snapshot it again" in message
    assert sink.scan() == [{"id": 1, old.name: value}]


def test_a_widening_in_a_lenient_session_is_applied_and_its_definition_kept(
    sink: Sink,
) -> None:
    columns = (
        A,
        V3,
        ColumnSchema("p", "decimal", precision=5, scale=2),
        ColumnSchema("f", "float"),
        ColumnSchema("u", "tinyint", unsigned=True),
    )
    row = {"id": 1, "a": 5, "v": "abc", "p": Decimal("1.25"), "f": 0.5, "u": 200}
    sink.create(_table(*columns), [row])
    wider = (
        ColumnSchema("a", "bigint"),
        V10,
        ColumnSchema("p", "decimal", precision=10, scale=2),
        ColumnSchema("f", "double"),
        ColumnSchema("u", "smallint"),
    )
    sink.ddl("ALTER TABLE t MODIFY …", DdlKind.ALTER_TABLE, _table(*wider), LENIENT)
    assert sink.scan() == [row]
    assert [t for _, t, _ in sink.fields()] == [
        "int",
        "long",
        "string",
        "decimal(10, 2)",
        "double",
        "int",
    ]
    # The new definition is what the next ALTER is compared with: back to VARCHAR(3) narrows.
    message = _refused(
        sink,
        "ALTER TABLE t MODIFY v …",
        DdlKind.ALTER_TABLE,
        _table(*wider[:1], V3, *wider[2:]),
        LENIENT,
    )
    assert "db.t.v would narrow from varchar(10) to varchar(3)" in message


def test_a_narrowing_in_a_strict_session_is_applied_but_not_with_alter_ignore(
    sink: Sink,
) -> None:
    """STRICT: the source refused the ALTER if a value did not fit, so none was cut."""
    sink.create(_table(V10), [{"id": 1, "v": "abc"}])
    ignore = _refused(sink, "alter ignore table t modify v …", DdlKind.ALTER_TABLE, _table(V3))
    assert "db.t.v would narrow from varchar(10) to varchar(3)" in ignore
    unknown = _refused(sink, "ALTER TABLE t MODIFY v …", DdlKind.ALTER_TABLE, _table(V3), None)
    assert "db.t.v would narrow" in unknown
    sink.ddl("ALTER TABLE t MODIFY v …", DdlKind.ALTER_TABLE, _table(V3), "STRICT_ALL_TABLES")
    assert sink.scan() == [{"id": 1, "v": "abc"}]


def test_the_definition_survives_a_reopen_and_a_table_without_one_gets_it(
    sink: Sink, tmp_path: Path
) -> None:
    # A table written before the definitions were kept: only a DECIMAL's is known.
    p10 = ColumnSchema("p", "decimal", precision=10, scale=2)
    p5 = ColumnSchema("p", "decimal", precision=5, scale=2)
    sink.create(_table(V10, p10), [{"id": 1, "v": "abcdefgh", "p": Decimal("1.25")}], docs=False)
    message = _refused(
        sink, "ALTER TABLE t MODIFY p …", DdlKind.ALTER_TABLE, _table(V10, p5), LENIENT
    )
    assert "db.t.p would narrow from decimal(10,2) to decimal(5,2)" in message
    # A change it lets through writes each column's definition into its field.
    sink.ddl("ALTER TABLE t MODIFY v …", DdlKind.ALTER_TABLE, _table(V10, p10), LENIENT)
    reopened = Sink(tmp_path)  # a restarted job: a new catalog connection, nothing cached
    reopened.known = sink.known
    message = _refused(
        reopened, "ALTER TABLE t MODIFY v …", DdlKind.ALTER_TABLE, _table(V3, p10), LENIENT
    )
    assert "db.t.v would narrow from varchar(10) to varchar(3)" in message
