"""The ``debezium`` encoding of data topics: rows as Debezium's MySQL connector writes them with
Kafka Connect's JsonConverter, so a Debezium consumer reads rowbus topics unchanged (pure).

`DebeziumRenderer` turns a `RowChange` (with its `TableSchema`) into the key and value bytes
Debezium 3.6 writes for it: the ``before``/``after``/``source``/``transaction``/``op``/``ts_ms``
envelope, ``op`` ``c``/``u``/``d``/``r``, the key as the JSON of the primary-key columns, each
with its Connect ``schema`` part when `DebeziumOptions.schemas` is on. Values follow
Debezium's default converters (``decimal.handling.mode=precise``,
``time.precision.mode=adaptive_time_microseconds``, ``binary.handling.mode=bytes``,
``bigint.unsigned.handling.mode=long``); where Debezium misreads a MariaDB value and rowbus
does not, the rendering follows Debezium's *schema* (a consumer's code depends on it) and the
docs list the difference (docs/debezium.md). It also renders the records Debezium writes
beside the rows: heartbeats, transaction-metadata BEGIN/END, schema changes.

Checked against Debezium's own output by ``python -m benchmarks.debezium_diff``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rowbus.protocol.events import (
    ColumnSchema,
    DdlChange,
    Op,
    RowChange,
    TableSchema,
)
from rowbus.protocol.values import (
    EPOCH_DATE_ORDINAL,
    EPOCH_NAIVE,
    ONE_US,
    Value,
    ZeroDate,
)

CONNECTOR_VERSION = "3.6.3.Final"
"""The Debezium release whose output this encoding matches (``source.version``)."""

_OPS = {Op.INSERT: "c", Op.UPDATE: "u", Op.DELETE: "d", Op.READ: "r"}

Json = dict[str, Any]
Convert = Callable[[Value], Any]


@dataclass(frozen=True)
class DebeziumOptions:
    """What a Debezium deployment's settings decide about its records."""

    prefix: str
    """``topic.prefix``: the logical server name, first part of every topic name."""
    schemas: bool = True
    """JsonConverter's ``schemas.enable``: each key and value as ``{"schema", "payload"}``."""
    transaction_metadata: bool = False
    """``provide.transaction.metadata``: the ``transaction`` block in each row and the
    ``<prefix>.transaction`` topic."""

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.prefix}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.prefix}.transaction"

    @property
    def schema_change_topic(self) -> str:
        return self.prefix

    def table_topic(self, schema: str, table: str) -> str:
        return f"{self.prefix}.{schema}.{table}"


# ---- columns: Connect schema and value conversion -------------------------------------------


def _field(ctype: str, name: str | None = None, **params: str) -> Json:
    out: Json = {"type": ctype}
    if name is not None:
        out["name"] = name
        out["version"] = 1
    if params:
        out["parameters"] = params
    return out


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _wrap_long(v: Value) -> Any:
    assert isinstance(v, int)
    return v - (1 << 64) if v >= 1 << 63 else v


def _decimal_bytes(scale: int) -> Convert:
    def convert(v: Value) -> Any:
        assert isinstance(v, Decimal)
        # Exact at any precision (Decimal arithmetic would round to the context's 28 digits).
        sign, digits, exponent = v.as_tuple()
        assert isinstance(exponent, int)
        unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
        unscaled = -unscaled if sign else unscaled
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return _b64(unscaled.to_bytes(size, "big", signed=True))

    return convert


def _bits(length: int) -> Convert:
    size = (length + 7) // 8

    def convert(v: Value) -> Any:
        assert isinstance(v, int)
        return _b64(v.to_bytes(size, "little"))

    return convert


def _date(v: Value) -> Any:
    if isinstance(v, ZeroDate):
        return None
    assert isinstance(v, dt.date)
    return v.toordinal() - EPOCH_DATE_ORDINAL


def _datetime_us(v: Value) -> Any:
    if isinstance(v, ZeroDate):
        return None
    assert isinstance(v, dt.datetime)
    return (v - EPOCH_NAIVE) // ONE_US


def _datetime_ms(v: Value) -> Any:
    us = _datetime_us(v)
    return None if us is None else us // 1000


def _zoned(fsp: int) -> Convert:
    def convert(v: Value) -> Any:
        if isinstance(v, ZeroDate):
            return None
        assert isinstance(v, dt.datetime)
        utc = v.astimezone(dt.UTC) if v.tzinfo is not None else v
        text = utc.strftime("%Y-%m-%dT%H:%M:%S")
        if fsp:
            text += f".{utc.microsecond:06d}"[: fsp + 1]
        return text + "Z"

    return convert


def _time(v: Value) -> Any:
    assert isinstance(v, dt.timedelta)
    return v // ONE_US


def _set(v: Value) -> Any:
    assert isinstance(v, frozenset)
    return v


def _as_is(v: Value) -> Any:
    return v


def _bytes(v: Value) -> Any:
    assert isinstance(v, bytes)
    return _b64(v)


def column_rendering(col: ColumnSchema) -> tuple[Json, Convert]:
    """The Connect schema of `col` (without ``field``/``optional``) and its value converter."""
    t = col.type
    if t == "tinyint" or (t == "smallint" and not col.unsigned):
        return _field("int16"), _as_is
    if t in ("smallint", "mediumint") or (t == "int" and not col.unsigned):
        return _field("int32"), _as_is
    if t == "int":
        return _field("int64"), _as_is
    if t == "bigint":
        return _field("int64"), _wrap_long if col.unsigned else _as_is
    if t == "float":
        return _field("float"), _float32
    if t == "double":
        return _field("double"), _as_is
    if t == "decimal":
        scale = col.scale or 0
        params = {"scale": str(scale)}
        if col.precision is not None:
            params["connect.decimal.precision"] = str(col.precision)
        out = _field("bytes", "org.apache.kafka.connect.data.Decimal", **params)
        return out, _decimal_bytes(scale)
    if t == "bit":
        length = col.length or 1
        if length == 1:
            return _field("boolean"), bool
        return _field("bytes", "io.debezium.data.Bits", length=str(length)), _bits(length)
    if t == "date":
        return _field("int32", "io.debezium.time.Date"), _date
    if t == "datetime":
        if (col.fsp or 0) <= 3:
            return _field("int64", "io.debezium.time.Timestamp"), _datetime_ms
        return _field("int64", "io.debezium.time.MicroTimestamp"), _datetime_us
    if t == "timestamp":
        return _field("string", "io.debezium.time.ZonedTimestamp"), _zoned(col.fsp or 0)
    if t == "time":
        return _field("int64", "io.debezium.time.MicroTime"), _time
    if t == "year":
        return _field("int32", "io.debezium.time.Year"), _as_is
    if t == "enum":
        return _field("string", "io.debezium.data.Enum", allowed=",".join(col.elements)), _as_is
    if t == "set":
        allowed = ",".join(col.elements)
        order = {m: i for i, m in enumerate(col.elements)}

        def members(v: Value) -> Any:
            assert isinstance(v, frozenset)
            return ",".join(sorted(v, key=lambda m: order.get(m, len(order))))

        return _field("string", "io.debezium.data.EnumSet", allowed=allowed), members
    if t == "json":  # MySQL's JSON; MariaDB's is a LONGTEXT, a plain string to Debezium too
        return _field("string", "io.debezium.data.Json"), _as_is
    if t == "geometry":
        return dict(_GEOMETRY), _geometry
    if t in ("binary", "varbinary") or t.endswith("blob"):
        return _field("bytes"), _bytes
    return _field("string"), _string


_GEOMETRY: Json = {
    "type": "struct",
    "fields": [
        {"type": "bytes", "optional": False, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ],
    "name": "io.debezium.data.geometry.Geometry",
    "version": 1,
    "doc": "Geometry",
}
"""Debezium's spatial struct. (A POINT column is Debezium's ``Point``, with ``x`` and ``y``
too; the binlog's table map says GEOMETRY for every spatial column, so rowbus cannot tell.)"""


def _geometry(v: Value) -> Any:
    """MySQL's spatial value (4 bytes of SRID, little-endian, then the WKB) as Debezium's
    ``{wkb, srid}`` (srid null when 0)."""
    assert isinstance(v, bytes)
    srid = int.from_bytes(v[:4], "little")
    return {"wkb": _b64(v[4:]), "srid": srid or None}


def _float32(v: Value) -> Any:
    """A FLOAT as Java prints a float: the shortest decimal that reads back as the same
    binary32 value (0.1, not 0.10000000149011612, which is its binary64 widening)."""
    assert isinstance(v, float)
    want = struct.pack("<f", v)
    # Java 17's Float.toString prints at least two significant digits where one would do
    # (1.4E-45, not 1E-45): start there, as Debezium's JSON does.
    for digits in range(2, 10):
        short = float(f"{v:.{digits}g}")
        try:
            if struct.pack("<f", short) == want:
                return short
        except OverflowError:  # rounded up past the largest binary32
            continue
    return v


_NUMERIC = ("tinyint", "smallint", "mediumint", "int", "bigint", "year")
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")


def default_value(col: ColumnSchema, convert: Convert) -> Any:
    """A column's literal DEFAULT as Debezium puts it in the field's schema (``default``),
    rendered like a value; None when there is none, it is NULL, or it is an expression
    (``current_timestamp()``) or of a type whose literal is not rendered here."""
    text = col.default
    if text is None or text.upper() == "NULL":
        return None
    value: Value
    try:
        if col.type in _TEXT and len(text) >= 2 and text[0] == text[-1] == "'":
            body = text[1:-1].replace("''", "'")
            value = frozenset(body.split(",")) - {""} if col.type == "set" else body
        elif col.type in _NUMERIC:
            value = int(text)
        elif col.type == "decimal":
            value = Decimal(text)
        elif col.type in ("float", "double"):
            value = float(text)
        else:
            return None
    except ValueError:
        return None
    return convert(value)


def _string(v: Value) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


# ---- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """What every row of one table shares: its column converters and its Connect schemas."""

    names: tuple[str, ...]
    converters: tuple[Convert, ...]
    key_at: tuple[int, ...]
    value_schema: Json
    envelope_schema: Json
    key_schema: Json | None
    source_db: str
    """``"db":…,"sequence":null,`` of the source block."""
    source_table: str
    """``"table":…,`` of the source block."""


def _row_schema(name: str, fields: Sequence[Json], optional: bool) -> Json:
    return {"type": "struct", "fields": list(fields), "optional": optional, "name": name}


def _source_schema() -> Json:
    def f(ctype: str, field: str, optional: bool = True, **extra: Any) -> Json:
        return {"type": ctype, "optional": optional, **extra, "field": field}

    return {
        "type": "struct",
        "fields": [
            f("string", "version", False),
            f("string", "connector", False),
            f("string", "name", False),
            f("int64", "ts_ms", False),
            f(
                "string",
                "snapshot",
                name="io.debezium.data.Enum",
                version=1,
                parameters={
                    "allowed": "true,first,first_in_data_collection,"
                    "last_in_data_collection,last,false,incremental"
                },
                default="false",
            ),
            f("string", "db", False),
            f("string", "sequence"),
            f("int64", "ts_us"),
            f("int64", "ts_ns"),
            f("string", "table"),
            f("int64", "server_id", False),
            f("string", "gtid"),
            f("string", "file", False),
            f("int64", "pos", False),
            f("int32", "row", False),
            f("int64", "thread"),
            f("string", "query"),
        ],
        "optional": False,
        "name": "io.debezium.connector.mysql.Source",
        "version": 1,
        "field": "source",
    }


_TRANSACTION_SCHEMA: Json = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


class DebeziumRenderer:
    """Renders rows of any table as Debezium does; caches per-table work by schema id."""

    def __init__(self, options: DebeziumOptions, server_id: int = 0) -> None:
        self.options = options
        self.server_id = server_id
        self._tables: dict[int, _Table] = {}
        self._heads: dict[int, tuple[Json | None, bytes]] = {}
        self._source_head = (
            f'{{"version":"{CONNECTOR_VERSION}","connector":"mysql","name":{_text(options.prefix)},'
        )

    def _table(self, table: TableSchema) -> _Table:
        found = self._tables.get(table.schema_id)
        if found is not None:
            return found
        prefix = self.options.table_topic(table.schema, table.table)
        fields, converters = [], []
        for col in table.columns:
            schema, convert = column_rendering(col)
            pk = col.name in table.primary_key
            field: Json = {**schema, "optional": col.nullable and not pk}
            default = default_value(col, convert)
            if default is not None:
                field["default"] = default
            fields.append({**field, "field": col.name})
            converters.append(convert)
        value_schema = _row_schema(f"{prefix}.Value", fields, True)
        envelope = {
            "type": "struct",
            "fields": [
                {**value_schema, "field": "before"},
                {**value_schema, "field": "after"},
                _source_schema(),
                _TRANSACTION_SCHEMA,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": f"{prefix}.Envelope",
            "version": 2,
        }
        key_at = table.pk_indexes
        key_schema = None
        if key_at:
            key_fields = [{**fields[i], "optional": False} for i in key_at]
            key_schema = _row_schema(f"{prefix}.Key", key_fields, False)
        if len(self._tables) >= 4096:
            self._tables.clear()
        found = self._tables[table.schema_id] = _Table(
            table.column_names,
            tuple(converters),
            key_at,
            value_schema,
            envelope,
            key_schema,
            f'"db":{_text(table.schema)},"sequence":null,',
            f'"table":{_text(table.table)},',
        )
        return found

    def _image(self, t: _Table, image: Sequence[Value] | None) -> Json | None:
        if image is None:
            return None
        return {
            name: None if v is None else conv(v)
            for name, conv, v in zip(t.names, t.converters, image, strict=True)
        }

    def _wrap(self, schema: Json | None, payload: Any) -> bytes:
        body = {"schema": schema, "payload": payload} if self.options.schemas else payload
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def _wrap_cached(self, schema: Json | None, payload: Any) -> bytes:
        """`_wrap` for a table's own schemas: their JSON is made once per table, not per row."""
        data = _dumps(payload)
        if not self.options.schemas:
            return data
        return self._head(schema) + data + b"}"

    def _head(self, schema: Json | None) -> bytes:
        """``{"schema":<schema>,"payload":`` for one of a table's schemas (by identity of the
        schema dict, which the table's `_Table` holds)."""
        key = id(schema)
        head = self._heads.get(key)
        if head is None or head[0] is not schema:
            if len(self._heads) >= 8192:
                self._heads.clear()
            head = self._heads[key] = (schema, b'{"schema":' + _dumps(schema) + b',"payload":')
        return head[1]

    def key(self, row: RowChange, table: TableSchema) -> bytes | None:
        """The record key: the primary-key columns; None for a keyless table."""
        t = self._table(table)
        if not t.key_at:
            return None
        image = row.image
        payload = {
            t.names[i]: None if image[i] is None else t.converters[i](image[i]) for i in t.key_at
        }
        return self._wrap_cached(t.key_schema, payload)

    def value(
        self,
        row: RowChange,
        table: TableSchema,
        ts_ms: int,
        transaction: tuple[int, int] | None = None,
        snapshot: str = "false",
        row_in_event: int = 0,
        event_start: int | None = None,
        commit_ms: int | None = None,
    ) -> bytes:
        """The change event. `ts_ms`: when rowbus processed it; `transaction`: the event's
        (total order, order within its table) in its transaction, with transaction metadata;
        `row_in_event`: its index among the rows of its binlog rows event; `event_start`:
        where that event begins (Debezium's ``pos``; default: the row's own position);
        `commit_ms`: the source's commit time (``source.ts_ms``; default: the row's clock, which
        runs ahead of it when the reader's clock is)."""
        t = self._table(table)
        pos = row.position
        if commit_ms is None:
            commit_ms = row.ts >> 16
        read = row.op is Op.READ
        src_ms = ts_ms if read else commit_ms
        gtid = "null" if pos.gtid is None else _text(pos.gtid)
        # Built as text, in Debezium's field order: the one per-row work left is the images.
        source = (
            f'{self._source_head}"ts_ms":{src_ms},"snapshot":"{snapshot if read else "false"}",'
            f'{t.source_db}"ts_us":{src_ms * 1000},"ts_ns":{src_ms * 1_000_000},{t.source_table}'
            f'"server_id":{self.server_id},"gtid":{gtid},"file":{_text(pos.file)},'
            f'"pos":{pos.offset if event_start is None else event_start},"row":{row_in_event},'
            '"thread":null,"query":null}'
        )
        txn = "null"
        if transaction is not None and self.options.transaction_metadata:
            txn = (
                f'{{"id":{_text(row.txn.id)},"total_order":{transaction[0]},'
                f'"data_collection_order":{transaction[1]}}}'
            )
        before = "null" if row.before is None else _text(self._image(t, row.before))
        after = "null" if row.after is None else _text(self._image(t, row.after))
        payload = (
            f'{{"before":{before},"after":{after},"source":{source},"transaction":{txn},'
            f'"op":"{_OPS[row.op]}","ts_ms":{ts_ms},"ts_us":{ts_ms * 1000},'
            f'"ts_ns":{ts_ms * 1_000_000}}}'
        ).encode()
        if not self.options.schemas:
            return payload
        return self._head(t.envelope_schema) + payload + b"}"

    # ---- the records beside the rows ----------------------------------------------------

    def heartbeat(self, ts_ms: int) -> tuple[bytes, bytes]:
        """A heartbeat record (key, value) of ``__debezium-heartbeat.<prefix>``."""
        key_schema = {
            "type": "struct",
            "fields": [{"type": "string", "optional": False, "field": "serverName"}],
            "optional": False,
            "name": "io.debezium.connector.common.ServerNameKey",
        }
        value_schema = {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}],
            "optional": False,
            "name": "io.debezium.connector.common.Heartbeat",
        }
        return (
            self._wrap(key_schema, {"serverName": self.options.prefix}),
            self._wrap(value_schema, {"ts_ms": ts_ms}),
        )

    def transaction(
        self, status: str, txn_id: str, ts_ms: int, counts: dict[str, int] | None = None
    ) -> tuple[bytes, bytes]:
        """A transaction-metadata record (key, value): ``BEGIN``, or ``END`` with the event
        count per ``db.table``."""
        key_schema = {
            "type": "struct",
            "fields": [{"type": "string", "optional": False, "field": "id"}],
            "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataKey",
        }
        collection = {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "data_collection"},
                {"type": "int64", "optional": False, "field": "event_count"},
            ],
            "optional": False,
        }
        value_schema = {
            "type": "struct",
            "fields": [
                {"type": "string", "optional": False, "field": "status"},
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": True, "field": "event_count"},
                {
                    "type": "array",
                    "items": collection,
                    "optional": True,
                    "field": "data_collections",
                },
                {"type": "int64", "optional": False, "field": "ts_ms"},
            ],
            "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataValue",
        }
        payload = {
            "status": status,
            "id": txn_id,
            "event_count": None if counts is None else sum(counts.values()),
            "data_collections": None
            if counts is None
            else [{"data_collection": c, "event_count": n} for c, n in counts.items()],
            "ts_ms": ts_ms,
        }
        return self._wrap(key_schema, {"id": txn_id}), self._wrap(value_schema, payload)

    def schema_change(self, ddl: DdlChange) -> tuple[bytes, bytes]:
        """A schema-change record (key, value) of the ``<prefix>`` topic (``tableChanges`` is
        left empty: the statement and its position are what rowbus carries here)."""
        key_schema = {
            "type": "struct",
            "fields": [{"type": "string", "optional": False, "field": "databaseName"}],
            "optional": False,
            "name": "io.debezium.connector.mysql.SchemaChangeKey",
            "version": 1,
        }
        commit_ms = ddl.ts >> 16
        payload = {
            "source": {
                "version": CONNECTOR_VERSION,
                "connector": "mysql",
                "name": self.options.prefix,
                "ts_ms": commit_ms,
                "snapshot": "false",
                "db": ddl.schema,
                "sequence": None,
                "ts_us": commit_ms * 1000,
                "ts_ns": commit_ms * 1_000_000,
                "table": ddl.table,
                "server_id": self.server_id,
                "gtid": ddl.position.gtid,
                "file": ddl.position.file,
                "pos": ddl.position.offset,
                "row": 0,
                "thread": None,
                "query": None,
            },
            "ts_ms": commit_ms,
            "databaseName": ddl.schema,
            "schemaName": None,
            "ddl": ddl.statement,
            "tableChanges": [],
        }
        value_schema = {
            "type": "struct",
            "fields": [
                _source_schema(),
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "string", "optional": True, "field": "databaseName"},
                {"type": "string", "optional": True, "field": "schemaName"},
                {"type": "string", "optional": True, "field": "ddl"},
                {
                    "type": "array",
                    "items": {"type": "struct", "fields": [], "optional": False},
                    "optional": False,
                    "field": "tableChanges",
                },
            ],
            "optional": False,
            "name": "io.debezium.connector.mysql.SchemaChangeValue",
            "version": 1,
        }
        return (
            self._wrap(key_schema, {"databaseName": ddl.schema}),
            self._wrap(value_schema, payload),
        )


def _text(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
