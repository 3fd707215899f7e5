"""Golden vectors: fixed records and their bytes in every encoding, in `protocol/testdata/`.

``python -m rowbus.protocol.golden`` rewrites the files from `SAMPLES`; the unit tests compare the
code against the checked-in files, so a change of wire format shows up as a failing test and a
diff of testdata. Other implementations check themselves against `testdata/manifest.json`:

* for each vector: ``kind``, ``encoding``, ``file`` (the exact Kafka value bytes), ``headers``
  (the Kafka headers) and ``expected`` (the decoded record, in the JSON encoding's form);
* ``keys``: message keys with their murmur2 and partition for a few partition counts;
* ``schema_ids``: the canonical bytes of a table schema and its id;
* ``versioned``: values of older versions (``vX.Y/``) with their headers and the record a
  decoder of this version reads from them;
* ``invalid``: values a decoder must refuse, with the reason.

The ``reader_ddl_*`` vectors (``"origin": "reader"``) are not built here: they are what the real
reader published for one statement of every DDL kind, masked, stored in
`testdata/reader_ddl.json` by ``tests/integration/producer/test_golden_ddl.py`` (which re-captures
them, and fails when the reader's output drifts from them); this module encodes them like the
others.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import zlib
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from rowbus.protocol.codec import PROTOCOL_VERSION, Encoding, encode, kind_name
from rowbus.protocol.codec.jsonc import to_json
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    ControlKind,
    ControlRecord,
    DdlChange,
    Heartbeat,
    IndexSchema,
    MarkerMode,
    Op,
    ReaderCheckpoint,
    Record,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.partition import encode_key, java_partition, murmur2
from rowbus.protocol.values import ZeroDate

TESTDATA = Path(__file__).resolve().parent / "testdata"
READER_DDL_FILE = TESTDATA / "reader_ddl.json"
"""The DDL records the real reader published, masked (module docstring)."""
SUFFIX = {Encoding.PROTOBUF: "pb", Encoding.AVRO: "avro", Encoding.JSON: "json"}
TS = (1_714_566_645_123 << 16) | 2  # 2024-05-01T12:30:45.123Z, logical 2
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
POSITION = BinlogPosition("binlog.000042", 123_456, GTID)


def _implicit_null(columns: tuple[ColumnSchema, ...]) -> tuple[ColumnSchema, ...]:
    """A nullable column without a DEFAULT clause has the implicit DEFAULT NULL, which
    information_schema shows and the reader publishes as ``NULL`` (§1.1)."""
    return tuple(
        replace(c, default="NULL") if c.nullable and c.default is None else c for c in columns
    )


ALL_TYPES = TableSchema(
    "shop",
    "all_types",
    _implicit_null(
        (
            ColumnSchema("id", "bigint", unsigned=True, nullable=False),
            ColumnSchema("i", "int", nullable=False, default="7"),
            ColumnSchema("big", "bigint"),
            ColumnSchema(
                "name",
                "varchar",
                length=64,
                charset="utf8mb4",
                default="'it''s'",
                collation="utf8mb4_bin",
            ),
            ColumnSchema("amount", "decimal", precision=65, scale=30),
            ColumnSchema("created", "datetime", fsp=6),
            ColumnSchema("seen", "timestamp", fsp=6, default="current_timestamp(6)"),
            ColumnSchema("ratio", "double"),
            ColumnSchema("f", "float"),
            ColumnSchema("flag", "tinyint"),
            ColumnSchema("body", "text", charset="utf8mb4", collation="utf8mb4_general_ci"),
            ColumnSchema("day", "date"),
            ColumnSchema("dur", "time", fsp=6),
            ColumnSchema("yr", "year", unsigned=True),  # the table map says so
            ColumnSchema("bits", "bit", length=12),
            ColumnSchema(
                "state",
                "enum",
                charset="utf8mb4",
                elements=("new", "paid", "shipped"),
                collation="utf8mb4_general_ci",
            ),
            ColumnSchema(
                "tags",
                "set",
                charset="utf8mb4",
                elements=("a", "b", "c"),
                collation="utf8mb4_general_ci",
            ),
            # MariaDB's JSON is LONGTEXT utf8mb4_bin with a check (MySQL 8 publishes `json`)
            ColumnSchema("doc", "longtext", charset="utf8mb4", collation="utf8mb4_bin"),
            ColumnSchema("raw", "blob"),
            ColumnSchema("code", "binary", length=4),
            # a nullable column added without a DEFAULT clause: information_schema shows NULL
            ColumnSchema(
                "gone",
                "varchar",
                length=8,
                charset="latin1",
                default="NULL",
                collation="latin1_swedish_ci",
            ),
        )
    ),
    ("id",),
    (
        IndexSchema("by_day", ("day",), unique=False),
        IndexSchema("by_name", ("name", "i"), unique=True),
    ),
)
ALL_VALUES: tuple[Any, ...] = (
    2**64 - 1,
    -2_147_483_648,
    -(2**63),
    "Zoë 😀",
    Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
    dt.datetime(2024, 5, 1, 12, 30, 45, 123456),
    dt.datetime(2024, 5, 1, 10, 30, 45, 5, tzinfo=dt.UTC),
    -1.5e-300,
    0.10000000149011612,
    -128,
    'line1\nline2 "quoted" \\ tab\t',
    dt.date(1000, 1, 1),
    -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    2155,
    0b1010_0000_0001,
    "paid",
    frozenset({"a", "c"}),
    '{"k": [1, 2.5, null]}',
    b"\x00\x01\xfe\xff",
    b"ab\x00\x00",
    None,
)

EDGE_TYPES = TableSchema(
    "shop",
    "edge_values",
    _implicit_null(
        (
            ColumnSchema("id", "int", nullable=False),
            ColumnSchema(
                "tags",
                "set",
                elements=("a", "b"),
                charset="utf8mb4",
                collation="utf8mb4_general_ci",
            ),
            ColumnSchema("vb", "varbinary", length=8),
            ColumnSchema("bl", "blob"),
            ColumnSchema("code", "binary", length=4),
            ColumnSchema("short", "time", fsp=6),
            ColumnSchema("least", "time", fsp=6),
            ColumnSchema("day", "date"),
            ColumnSchema("at", "datetime", fsp=3),
            ColumnSchema("seen", "timestamp", fsp=0),
            ColumnSchema("part", "date"),
            ColumnSchema("yr", "year", unsigned=True),  # the table map says so
            ColumnSchema(
                "l1", "varchar", length=8, charset="latin1", collation="latin1_swedish_ci"
            ),
            ColumnSchema(
                "e", "enum", elements=("x", "y"), charset="utf8mb4", collation="utf8mb4_general_ci"
            ),
            ColumnSchema("c", "char", length=5, charset="utf8mb4", collation="utf8mb4_general_ci"),
            ColumnSchema(
                "vc", "varchar", length=8, charset="utf8mb4", collation="utf8mb4_general_ci"
            ),
            # MariaDB's JSON is LONGTEXT utf8mb4_bin with a check (MySQL 8 publishes `json`)
            ColumnSchema("doc", "longtext", charset="utf8mb4", collation="utf8mb4_bin"),
            ColumnSchema("u64", "bigint", unsigned=True),
            ColumnSchema("bits", "bit", length=64),
            ColumnSchema("y0", "date"),
        )
    ),
    ("id",),
)
EDGE_VALUES: tuple[Any, ...] = (
    1,
    frozenset(),  # the empty SET '' (not NULL)
    b"",  # empty VARBINARY: BYTES, not STRING
    b"",  # empty BLOB
    b"a\x00\x00\x00",  # BINARY(4) 'a': padded with zero bytes as the server stores it
    -dt.timedelta(microseconds=250_000),  # TIME '-00:00:00.250000'
    -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999),
    ZeroDate("0000-00-00"),
    ZeroDate("0000-00-00 00:00:00.000"),  # DATETIME(3): the fraction digits the column prints
    ZeroDate("0000-00-00 00:00:00"),  # zero TIMESTAMP
    ZeroDate("2024-00-15"),  # a zero month (NO_ZERO_IN_DATE off)
    0,  # YEAR 0000
    "\u00c3\u0081",  # latin1 bytes C3 81: MySQL's latin1 maps 0x81 to U+0081
    "",  # ENUM error value '' (index 0)
    "ab",  # CHAR(5) 'ab   ': MariaDB and MySQL strip the trailing spaces
    "ab  ",  # VARCHAR keeps them
    '{"a": [1, 2.5, null, true], "b": "x"}',  # JSON: its text, as the server prints it
    2**64 - 1,
    2**64 - 1,
    ZeroDate("0000-01-01"),  # year 0: a date MySQL has and Python's calendar lacks
)

SAMPLES: dict[str, Record] = {
    "row_insert": RowChange(
        source="db1",
        ts=TS,
        op=Op.INSERT,
        schema="shop",
        table="all_types",
        schema_id=ALL_TYPES.schema_id,
        primary_key=("id",),
        before=None,
        after=ALL_VALUES,
        txn=TxnRef(GTID, 0, 3),
        position=POSITION,
    ),
    "row_update": RowChange(
        source="db1",
        ts=TS,
        op=Op.UPDATE,
        schema="shop",
        table="orders",
        schema_id=7_211_092_761_145_513_123,
        primary_key=("id",),
        before=(42, "new", Decimal("10.00"), None),
        after=(42, "paid", Decimal("10.50"), dt.datetime(2024, 5, 1, 12, 30, 45)),
        txn=TxnRef(GTID, 1, 3),
        position=BinlogPosition("binlog.000042", 123_789, GTID),
    ),
    "row_delete": RowChange(
        source="db1",
        ts=TS,
        op=Op.DELETE,
        schema="shop",
        table="orders",
        schema_id=7_211_092_761_145_513_123,
        primary_key=("id",),
        before=(43, "shipped", Decimal("0.00"), dt.datetime(2023, 12, 31, 23, 59, 59, 999999)),
        after=None,
        txn=TxnRef("binlog.000042:123000", 2),
        position=BinlogPosition("binlog.000042", 124_000),
    ),
    "ddl": DdlChange(
        source="db1",
        ts=TS + 1,
        schema="shop",
        table="all_types",
        statement="ALTER TABLE all_types ADD COLUMN gone VARCHAR(8)",
        table_schema=ALL_TYPES,
        position=BinlogPosition("binlog.000042", 125_000, GTID.replace(":23", ":24")),
        txn=TxnRef(GTID.replace(":23", ":24"), 0, 1),
        kind=DdlKind.ALTER_TABLE,
        sql_mode="STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER",
        timestamp_us=1_714_566_645_123_456,  # TS's moment (§3: ts follows the statement's time)
        time_zone="+05:30",
    ),
    "ddl_truncate": DdlChange(
        source="db1",
        ts=TS + 2,
        schema="shop",
        table="all_types",
        statement="TRUNCATE TABLE all_types",
        table_schema=ALL_TYPES,
        position=BinlogPosition("binlog.000042", 125_500),
        kind=DdlKind.TRUNCATE_TABLE,
    ),
    "ddl_rename": DdlChange(
        source="db1",
        ts=TS + 2,
        schema="shop",
        table=None,
        statement="RENAME TABLE a TO b, shop.c TO other.d",
        table_schema=None,
        position=BinlogPosition("binlog.000042", 125_600),
        kind=DdlKind.RENAME_TABLE,
    ),
    "ddl_drop": DdlChange(
        source="db1",
        ts=TS + 2,
        schema="shop",
        table=None,
        statement="DROP DATABASE scratch",
        table_schema=None,
        position=BinlogPosition("binlog.000042", 126_000),
        kind=DdlKind.DROP_DATABASE,
    ),
    "row_edge_values": RowChange(
        source="db1",
        ts=TS,
        op=Op.INSERT,
        schema="shop",
        table="edge_values",
        schema_id=EDGE_TYPES.schema_id,
        primary_key=("id",),
        before=None,
        after=EDGE_VALUES,
        txn=TxnRef(GTID, 2, 3),
        position=POSITION,
    ),
    "resolved": Resolved(source="db1", ts=TS + 2),
    "heartbeat": Heartbeat(
        source="db1", ts=TS + 3, reader_id="reader-a", position=POSITION, lag_ms=250
    ),
    "schema": SchemaRecord.of(ALL_TYPES, "db1", TS + 1),
    "checkpoint": ReaderCheckpoint(
        source="db1",
        position=POSITION,
        gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23",
        ts=TS,
        offsets=(("rowbus.db1", 0, 1001), ("rowbus.db1", 1, 998)),
        reader_id="reader-a",
        epoch=3,
    ),
    "checkpoint_switched": ReaderCheckpoint(
        source="db1",
        position=BinlogPosition("replica-bin.000003", 4_567, GTID, upstream=1),
        gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23",
        ts=TS + 5,
        offsets=(("rowbus.db1", 0, 1003),),
        reader_id="reader-b",
        epoch=4,
        upstream_server="server_id:12",
    ),
    # 1.3: a snapshot row (op READ, §9.5) and a checkpoint taken while a snapshot runs.
    "row_snapshot": RowChange(
        source="db1",
        ts=TS,
        op=Op.READ,
        schema="shop",
        table="all_types",
        schema_id=ALL_TYPES.schema_id,
        primary_key=("id",),
        before=None,
        after=ALL_VALUES,
        txn=TxnRef("snapshot:shop.all_types:7", 4242),
        position=BinlogPosition("binlog.000042", 123_456, GTID),
    ),
    "checkpoint_snapshot": ReaderCheckpoint(
        source="db1",
        position=POSITION,
        gtid_set="3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23",
        ts=TS,
        offsets=(("rowbus.db1", 0, 1001),),
        reader_id="reader-a",
        epoch=1,
        snapshot='{"v":1,"rows":4243}',
    ),
    # 1.5: the markers around one table's snapshot (§9.7): the begin below the table's first
    # row (index 4200), the end after its last (4242 was the last row read).
    "snapshot_begin": SnapshotBegin(
        source="db1",
        ts=TS - 1,
        schema="shop",
        table="all_types",
        snapshot="snapshot:0:shop.all_types",
        mode=MarkerMode.REPLACE,
        position=BinlogPosition("binlog.000042", 123_456, GTID),
        txn=TxnRef("snapshot:0:shop.all_types:begin", 4200),
    ),
    "snapshot_end": SnapshotEnd(
        source="db1",
        ts=TS + 1,
        schema="shop",
        table="all_types",
        snapshot="snapshot:incremental:shop.all_types:3",
        mode=MarkerMode.REFRESH,
        position=BinlogPosition("binlog.000042", 123_457, GTID, upstream=1),
        txn=TxnRef("snapshot:incremental:shop.all_types:3:end", 4243),
        rows=42,
    ),
    "control": ControlRecord(
        lock_id="shop.orders:ALTER#1",
        kind=ControlKind.INTENT,
        shard="db1/shop.orders_3",
        statement="ALTER TABLE orders_3 ADD c INT",
        ts=TS,
        actor="subscriber-1",
        detail='{"target":"shop.orders","seq":1,"group":["db1/shop.orders_3","db2/shop.orders_1"],'
        '"mode":"pessimistic","at_ms":1714566645200}',
    ),
}

KEYS: tuple[tuple[str, str | None, tuple[Any, ...]], ...] = (
    ("shop", "orders", (42,)),
    ("shop", "orders", (2**64 - 1, "é")),
    ("shop", "orders", ()),
    ("shop", "events", (dt.date(2024, 5, 1), Decimal("1.10"))),
    ("shop", None, ()),
)


def _invalid() -> list[dict[str, Any]]:
    good, headers = encode(SAMPLES["resolved"])
    body = b"\x52\x00"  # Envelope field 10: a kind this version does not know
    return [
        {"why": "truncated", "hex": good[:-1].hex(), "headers": _headers(headers)},
        {
            "why": "crc mismatch",
            "hex": (good[:3] + bytes([good[3] ^ 1]) + good[4:]).hex(),
            "headers": _headers(headers),
        },
        {
            "why": "unknown major version",
            "hex": good.hex(),
            "headers": {**_headers(headers), "rowbus-version": "2.0"},
        },
        {
            "why": "unknown kind",
            "hex": (body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")).hex(),
            "headers": {"rowbus-version": "1.0", "rowbus-encoding": "protobuf"},
        },
    ]


def _headers(headers: list[tuple[str, bytes]]) -> dict[str, str]:
    return {k: v.decode() for k, v in headers}


def reader_samples(path: Path = READER_DDL_FILE) -> dict[str, Record]:
    """The captured records of `path`, as `reader_ddl_<name>` samples."""
    from rowbus.protocol.codec.jsonc import from_json

    if not path.exists():
        return {}
    records = json.loads(path.read_text(encoding="utf-8"))["records"]
    return {f"reader_ddl_{name}": from_json(record) for name, record in records.items()}


def build() -> dict[str, bytes]:
    """Every testdata file: name -> bytes."""
    files: dict[str, bytes] = {}
    vectors = []
    captured = reader_samples()
    for name, record in {**SAMPLES, **captured}.items():
        expected = f"{name}.expected.json"
        files[expected] = _pretty(to_json(record))
        for encoding in Encoding:
            value, headers = encode(record, encoding)
            file = f"{name}.{SUFFIX[encoding]}"
            files[file] = value
            vectors.append(
                {
                    "name": name,
                    "kind": kind_name(record),
                    "encoding": encoding.value,
                    "file": file,
                    "headers": _headers(headers),
                    "expected": expected,
                    **({"origin": "reader"} if name in captured else {}),
                }
            )
    keys = [
        {
            "schema": s,
            "table": t,
            "values": [to_json_value(v) for v in vals],
            "key": encode_key(s, t, vals).decode("utf-8"),
            "murmur2": murmur2(encode_key(s, t, vals)),
            "partitions": {str(n): java_partition(encode_key(s, t, vals), n) for n in (1, 3, 12)},
        }
        for s, t, vals in KEYS
    ]
    manifest = {
        "protocol_version": PROTOCOL_VERSION,
        "vectors": vectors,
        "keys": keys,
        "schema_ids": [
            {
                "canonical": ALL_TYPES.canonical_bytes().decode("utf-8"),
                "schema_id": ALL_TYPES.schema_id,
            }
        ],
        "invalid": _invalid(),
        "versioned": _versioned(files),
    }
    files["manifest.json"] = _pretty(manifest)
    return files


_VERSIONED_KINDS = {"row_insert": "row", "ddl": "ddl", "schema": "schema"}
_VERSIONED_KINDS |= {"checkpoint": "checkpoint", "heartbeat": "heartbeat"}


def _versioned(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The values older writers sent (`testdata/vX.Y/`, frozen when each version came), with
    their headers and the record this version's decoder reads from them (later fields at
    their defaults): a decoder must read them so. Their expected records go into `files`."""
    from rowbus.protocol.codec import decode

    out = []
    by_suffix = {suffix: encoding for encoding, suffix in SUFFIX.items()}
    for folder in sorted(
        TESTDATA.glob("v*.*"), key=lambda p: [int(x) for x in p.name[1:].split(".")]
    ):
        version = folder.name[1:]
        values = (p for p in folder.iterdir() if not p.name.endswith(".expected.json"))
        for path in sorted(p for p in values if p.suffix[1:] in by_suffix):
            encoding = by_suffix[path.suffix[1:]]
            kind = _VERSIONED_KINDS[path.stem]
            headers = {
                "rowbus-version": version,
                "rowbus-encoding": encoding.value,
                "rowbus-kind": kind,
            }
            record = decode(
                path.read_bytes(),
                [(k, v.encode()) for k, v in headers.items()],
                f"testdata/{folder.name}/{path.name}",
            )
            expected = f"{folder.name}/{path.stem}.expected.json"
            files[expected] = _pretty(to_json(record))
            out.append(
                {
                    "name": path.stem,
                    "version": version,
                    "kind": kind,
                    "encoding": encoding.value,
                    "file": f"{folder.name}/{path.name}",
                    "headers": headers,
                    "expected": expected,
                }
            )
    return out


def to_json_value(v: Any) -> Any:
    """A value in its JSON form (for the manifest)."""
    from rowbus.protocol.codec.jsonc import value_to_json

    return value_to_json(v)


def _pretty(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write(directory: Path = TESTDATA) -> list[Path]:
    """Write every file of `build` into `directory`; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build().items():
        path = directory / name
        path.write_bytes(data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    written = write(Path(sys.argv[1]) if len(sys.argv) > 1 else TESTDATA)
    print(f"wrote {len(written)} files to {written[0].parent}")
