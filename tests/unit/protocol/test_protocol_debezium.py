"""The debezium encoding's rendering (pure): values as Debezium 3.6's default converters render
them (the expected values are Debezium's own output for the fidelity corpus, captured with
benchmarks/debezium/DbzDump.java on MariaDB 10.11), the envelope, the key, and the refusal of
such records by rowbus's decoder."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from rowbus.protocol.codec import ENCODING_HEADER, decode
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.debezium_columns import column_rendering
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, RowChange, TableSchema, TxnRef
from rowbus.protocol.values import Value, ZeroDate

UTC = dt.UTC


def render(col: ColumnSchema, value: Value) -> Any:
    return column_rendering(col)[1](value)


@pytest.mark.parametrize(
    ("col", "value", "debezium"),
    [
        (ColumnSchema("v", "bigint", unsigned=True), 18446744073709551615, -1),
        (ColumnSchema("v", "bigint", unsigned=True), 9223372036854775808, -9223372036854775808),
        (
            ColumnSchema("v", "decimal", precision=65, scale=30),
            Decimal("99999999999999999999999999999999999.999999999999999999999999999999"),
            "APMWJxx/w5CKi+9GTjlF73olNgn//////////w==",
        ),
        (
            ColumnSchema("v", "decimal", precision=65, scale=30),
            Decimal("-0.000000000000000000000000000001"),
            "/w==",
        ),
        (ColumnSchema("v", "decimal", precision=10, scale=0), Decimal("-9999999999"), "/av0HAE="),
        (ColumnSchema("v", "decimal", precision=5, scale=5), Decimal("0.99999"), "AYaf"),
        (ColumnSchema("v", "float"), 0.10000000149011612, 0.1),
        (ColumnSchema("v", "float"), -1.401298464324817e-45, -1.4e-45),
        (ColumnSchema("v", "float"), 3.4028200183756560e38, 3.40282e38),
        (ColumnSchema("v", "bit", length=1), 1, True),
        (ColumnSchema("v", "bit", length=64), 5, "BQAAAAAAAAA="),
        (ColumnSchema("v", "date"), dt.date(1000, 1, 1), -354285),
        (ColumnSchema("v", "date"), ZeroDate("0000-00-00"), None),
        # NOT NULL: the epoch, as Debezium writes it (its schema does not allow null)
        (ColumnSchema("v", "date", nullable=False), ZeroDate("0000-00-00"), 0),
        (ColumnSchema("v", "datetime", nullable=False), ZeroDate("0000-00-00 00:00:00"), 0),
        (ColumnSchema("v", "datetime", fsp=0), dt.datetime(1000, 1, 1), -30610224000000),
        (
            ColumnSchema("v", "datetime", fsp=3),
            dt.datetime(2024, 1, 1, 0, 0, 0, 123000),
            1704067200123,
        ),
        (
            ColumnSchema("v", "datetime", fsp=6),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            253402300799999999,
        ),
        (
            ColumnSchema("v", "timestamp", fsp=0),
            dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
            "1970-01-01T00:00:01Z",
        ),
        (
            ColumnSchema("v", "timestamp", fsp=6),
            dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
            "2038-01-19T03:14:07.999999Z",
        ),
        (ColumnSchema("v", "time", fsp=6), -dt.timedelta(microseconds=250000), -250000),
        (
            ColumnSchema("v", "time", fsp=0),
            dt.timedelta(hours=838, minutes=59, seconds=59),
            3020399000000,
        ),
        (ColumnSchema("v", "set", elements=("x", "y", "z")), frozenset({"z", "x"}), "x,z"),
        (ColumnSchema("v", "binary", length=4), b"a\0\0\0", "YQAAAA=="),
        (ColumnSchema("v", "year", unsigned=True), 2155, 2155),
    ],
    ids=lambda x: str(x)[:30] if not isinstance(x, ColumnSchema) else x.type,
)
def test_values_render_as_debezium_renders_them(
    col: ColumnSchema, value: Value, debezium: object
) -> None:
    got = render(col, value)
    assert got == debezium and type(got) is type(debezium)


@pytest.mark.parametrize(
    ("col", "schema"),
    [
        (ColumnSchema("v", "tinyint", unsigned=True), {"type": "int16"}),
        (ColumnSchema("v", "smallint", unsigned=True), {"type": "int32"}),
        (ColumnSchema("v", "int", unsigned=True), {"type": "int64"}),
        (
            ColumnSchema("v", "decimal", precision=12, scale=2),
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "version": 1,
                "parameters": {"scale": "2", "connect.decimal.precision": "12"},
            },
        ),
        (
            ColumnSchema("v", "bit", length=64),
            {
                "type": "bytes",
                "name": "io.debezium.data.Bits",
                "version": 1,
                "parameters": {"length": "64"},
            },
        ),
        (
            ColumnSchema("v", "enum", elements=("a", "b", "")),
            {
                "type": "string",
                "name": "io.debezium.data.Enum",
                "version": 1,
                "parameters": {"allowed": "a,b,"},
            },
        ),
        (ColumnSchema("v", "longtext"), {"type": "string"}),
    ],
    ids=lambda x: x.type if isinstance(x, ColumnSchema) else "",
)
def test_column_schemas_are_debeziums(col: ColumnSchema, schema: dict[str, Any]) -> None:
    assert column_rendering(col)[0] == schema


TABLE = TableSchema(
    "shop",
    "orders",
    (ColumnSchema("id", "int", nullable=False), ColumnSchema("v", "varchar")),
    ("id",),
)


def _row(op: Op, before: tuple[Value, ...] | None, after: tuple[Value, ...] | None) -> RowChange:
    return RowChange(
        source="src",
        ts=(1_795_727_077_000 << 16) | 3,
        op=op,
        schema="shop",
        table="orders",
        schema_id=TABLE.schema_id,
        primary_key=("id",),
        before=before,
        after=after,
        txn=TxnRef("0-1-7", 0, 1),
        position=BinlogPosition("binlog.000001", 6843, "0-1-7"),
    )


def test_envelope_key_and_schemas_switch() -> None:
    renderer = DebeziumRenderer(DebeziumOptions("dbz", transaction_metadata=True), server_id=1)
    row = _row(Op.UPDATE, (7, "a"), (7, "b"))
    key = json.loads(renderer.key(row, TABLE) or b"")
    assert key["payload"] == {"id": 7}
    assert key["schema"]["name"] == "dbz.shop.orders.Key"
    value = json.loads(renderer.value(row, TABLE, 1_795_727_131_115, (1, 1)))
    payload = value["payload"]
    assert (payload["op"], payload["before"], payload["after"]) == (
        "u",
        {"id": 7, "v": "a"},
        {"id": 7, "v": "b"},
    )
    assert payload["ts_ms"] == 1_795_727_131_115
    source = payload["source"]
    assert (source["ts_ms"], source["db"], source["table"], source["server_id"]) == (
        1_795_727_077_000, "shop", "orders", 1,
    )  # fmt: skip
    assert (source["file"], source["pos"], source["gtid"]) == ("binlog.000001", 6843, "0-1-7")
    assert payload["transaction"] == {"id": "0-1-7", "total_order": 1, "data_collection_order": 1}
    assert value["schema"]["name"] == "dbz.shop.orders.Envelope"
    bare = DebeziumRenderer(DebeziumOptions("dbz", schemas=False))
    assert json.loads(bare.key(row, TABLE) or b"") == {"id": 7}
    assert json.loads(bare.value(row, TABLE, 0))["transaction"] is None


def test_a_keyless_table_has_no_key() -> None:
    keyless = TableSchema("shop", "log", (ColumnSchema("v", "varchar"),), ())
    row = RowChange(
        source="src", ts=1 << 16, op=Op.INSERT, schema="shop", table="log",
        schema_id=keyless.schema_id, primary_key=(), before=None, after=("x",),
        txn=TxnRef("t", 0, 1), position=BinlogPosition("b.1", 4),
    )  # fmt: skip
    assert DebeziumRenderer(DebeziumOptions("dbz")).key(row, keyless) is None


def test_rowbus_decoders_refuse_debezium_records_in_one_line() -> None:
    renderer = DebeziumRenderer(DebeziumOptions("dbz"))
    value = renderer.value(_row(Op.INSERT, None, (1, "a")), TABLE, 0)
    for headers in ([(ENCODING_HEADER, b"debezium")], None):  # rowbus's, Debezium's own
        with pytest.raises(ProtocolError) as caught:
            decode(value, headers, "dbz.shop.orders[0]@5")
        text = str(caught.value)
        assert "\n" not in text
        assert "debezium encoding" in text and "native encoding" in text
        assert text.startswith("dbz.shop.orders[0]@5: ")


def test_decimal_bytes_read_back_exactly() -> None:
    col = ColumnSchema("v", "decimal", precision=65, scale=30)
    for text in ("-1.5", "0", "123456789012345678901234567890.123456789012345678901234567891"):
        raw = base64.b64decode(render(col, Decimal(text)))
        unscaled = int.from_bytes(raw, "big", signed=True)
        assert Decimal(f"{unscaled}E-30") == Decimal(text)  # exact: no context rounding


@pytest.mark.parametrize(
    ("col", "default"),
    [
        (ColumnSchema("v", "int", default="7"), 7),
        (ColumnSchema("v", "varchar", default="'it''s'"), "it's"),
        (ColumnSchema("v", "enum", elements=("a", "b"), default="'b'"), "b"),
        (ColumnSchema("v", "set", elements=("x", "y"), default="'y,x'"), "x,y"),
        (ColumnSchema("v", "decimal", precision=5, scale=2, default="1.25"), "fQ=="),
        (ColumnSchema("v", "varchar", default="NULL"), None),
        (ColumnSchema("v", "timestamp", default="current_timestamp()"), None),
        # Debezium 3.6.3's own defaults for benchmarks.debezium_diff's `defaults` corpus:
        (ColumnSchema("v", "date", default="'2020-02-29'"), 18321),
        (ColumnSchema("v", "date", nullable=False, default="'0000-00-00'"), 0),
        (ColumnSchema("v", "date", default="'0000-00-00'"), None),
        (ColumnSchema("v", "datetime", fsp=0, default="'2020-01-02 03:04:05'"), 1577934245000),
        (
            ColumnSchema("v", "datetime", fsp=6, default="'2020-01-02 03:04:05.123456'"),
            1577934245123456,
        ),
        (ColumnSchema("v", "datetime", default="current_timestamp()"), 0),
        (
            ColumnSchema("v", "timestamp", fsp=0, default="'2020-01-02 03:04:05'"),
            "2020-01-02T03:04:05Z",
        ),
        (
            ColumnSchema("v", "timestamp", fsp=6, nullable=False, default="current_timestamp(6)"),
            "1970-01-01T00:00:00Z",
        ),
        (ColumnSchema("v", "time", default="'12:34:56'"), 45296000000),
        (ColumnSchema("v", "time", fsp=3, default="'-01:02:03.500'"), -3723500000),
        (ColumnSchema("v", "bit", length=3, default="b'101'"), "BQ=="),
        (ColumnSchema("v", "int", default="(1 + 1)"), None),
        (ColumnSchema("v", "varchar", default="concat('a','b')"), None),
    ],
    ids=lambda x: x.default if isinstance(x, ColumnSchema) else "",
)
def test_literal_defaults_go_into_the_field_schema(col: ColumnSchema, default: object) -> None:
    from rowbus.protocol.debezium_columns import default_value

    assert default_value(col, column_rendering(col)[1]) == default


def test_spatial_values_are_debeziums_geometry_struct() -> None:
    # SRID 4326 then the WKB of POINT(3 4): Debezium's own output for that value.
    raw = bytes.fromhex("e6100000") + base64.b64decode("AQEAAAAAAAAAAAAIQAAAAAAAABBA")
    col = ColumnSchema("s", "geometry")
    assert render(col, raw) == {"wkb": "AQEAAAAAAAAAAAAIQAAAAAAAABBA", "srid": 4326}
    assert render(col, bytes(4) + b"\x01")["srid"] is None
    assert column_rendering(col)[0]["name"] == "io.debezium.data.geometry.Geometry"
