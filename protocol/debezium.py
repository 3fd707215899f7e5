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

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rowbus.protocol.debezium_columns import (
    Convert,
    Json,
    column_rendering,
    default_value,
)
from rowbus.protocol.debezium_history import CHANGE_SCHEMA, table_changes
from rowbus.protocol.events import DdlChange, Op, RowChange, TableSchema
from rowbus.protocol.values import Value

CONNECTOR_VERSION = "3.6.3.Final"
"""The Debezium release whose output this encoding matches (``source.version``)."""

_OPS = {Op.INSERT: "c", Op.UPDATE: "u", Op.DELETE: "d", Op.READ: "r"}


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

    def schema_change(self, ddl: DdlChange, event_start: int | None = None) -> tuple[bytes, bytes]:
        """A schema-change record (key, value) of the ``<prefix>`` topic: the statement, its
        position and the table after it (``tableChanges``, `debezium_history`). `event_start`:
        where its query event begins (Debezium's ``pos``; default: the DDL's own position)."""
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
                "pos": ddl.position.offset if event_start is None else event_start,
                "row": 0,
                "thread": None,
                "query": None,
            },
            "ts_ms": commit_ms,
            "databaseName": ddl.schema,
            "schemaName": None,
            "ddl": ddl.statement,
            "tableChanges": table_changes(ddl),
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
                    "items": CHANGE_SCHEMA,
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
