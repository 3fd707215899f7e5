"""The event model: frozen dataclasses for every record rowbus writes to Kafka.

Data topics carry `Event` (`RowChange`, `DdlChange`, `Resolved`, `Heartbeat`, and the snapshot
markers `SnapshotBegin` / `SnapshotEnd` of protocol 1.5); the schemas topic
carries `SchemaRecord`, the checkpoints topic `ReaderCheckpoint`, the control topic
`ControlRecord`. Every record has `source` (the upstream server's name) and `ts` (the source's
hybrid logical clock, see `rowbus.protocol.hlc`), except `ControlRecord`, which has an `actor`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, TypeAlias

from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.values import Value


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """Where an event sits in the upstream binlog.

    `upstream` counts the switches of the source to another server (a replica after a
    failover, PROTOCOL.md §9.4): a file and offset are only comparable within one upstream, and
    order keys lead with it so they keep growing across a switch."""

    file: str
    offset: int
    gtid: str | None = None
    upstream: int = 0

    def __str__(self) -> str:
        base = f"{self.file}:{self.offset}"
        base = f"{base} gtid={self.gtid}" if self.gtid else base
        return f"{base} upstream={self.upstream}" if self.upstream else base

    @property
    def file_number(self) -> int:
        """The numeric suffix of the binlog file name (``binlog.000042`` -> 42), or -1."""
        digits = self.file.rpartition(".")[2]
        return int(digits) if digits.isdigit() else -1


class Op(Enum):
    """What a `RowChange` does to its row."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    READ = "read"
    """1.3: the row as an initial or incremental snapshot read it — "it is so", not "it
    changed" (PROTOCOL.md §9.5). Like an insert it has only `after`; applied as an upsert."""


@dataclass(frozen=True, slots=True)
class TxnRef:
    """The upstream transaction an event belongs to: its id (GTID, or ``file:pos`` of BEGIN),
    the event's 0-based index in it, and the number of row events when known."""

    id: str
    index: int
    count: int | None = None


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    """One column of a table, as the binlog's table map and FULL row metadata describe it."""

    name: str
    type: str
    unsigned: bool = False
    nullable: bool = True
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    charset: str | None = None
    elements: tuple[str, ...] = ()
    default: str | None = None
    """The column's DEFAULT as SQL text, as MariaDB's information_schema.COLUMNS shows it
    (``7``, ``'abc'``, ``NULL``, ``current_timestamp()``); None: no DEFAULT clause (1.1)."""
    collation: str | None = None
    """The column's collation (``utf8mb4_bin``), None for non-character columns (1.1)."""

    def to_dict(self) -> dict[str, Any]:
        """The canonical dict form (all fields, fixed names), used by `schema_id` and JSON."""
        return {
            "name": self.name,
            "type": self.type,
            "unsigned": self.unsigned,
            "nullable": self.nullable,
            "length": self.length,
            "precision": self.precision,
            "scale": self.scale,
            "fsp": self.fsp,
            "charset": self.charset,
            "elements": list(self.elements),
            "default": self.default,
            "collation": self.collation,
        }


@dataclass(frozen=True, slots=True)
class IndexSchema:
    """A secondary index (UNIQUE or not) of a table: its name and columns in key order (1.1)."""

    name: str
    columns: tuple[str, ...]
    unique: bool

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "columns": list(self.columns), "unique": self.unique}


def _index_name(index: IndexSchema) -> str:
    return index.name


@dataclass(frozen=True)
class TableSchema:
    """A table's columns in binlog order, its primary key (column names, key order) and its
    other indexes (1.1; sorted by name)."""

    schema: str
    table: str
    columns: tuple[ColumnSchema, ...]
    primary_key: tuple[str, ...]
    indexes: tuple[IndexSchema, ...] = ()

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        missing = [k for k in self.primary_key if k not in names]
        if missing:
            raise ValueError(f"primary key columns {missing} are not columns of {self.qualified}")

    @property
    def qualified(self) -> str:
        """``schema.table``."""
        return f"{self.schema}.{self.table}"

    def to_dict(self) -> dict[str, Any]:
        """The canonical dict form: keys schema, table, columns, primary_key."""
        return {
            "schema": self.schema,
            "table": self.table,
            "columns": [c.to_dict() for c in self.columns],
            "primary_key": list(self.primary_key),
            "indexes": [i.to_dict() for i in self.indexes],
        }

    def canonical_bytes(self) -> bytes:
        """Compact JSON of `to_dict` with sorted keys and indexes sorted by name (code point
        order: a writer that lists them otherwise still computes the same id), UTF-8,
        non-ASCII unescaped."""
        canonical = self.to_dict()
        canonical["indexes"] = [i.to_dict() for i in sorted(self.indexes, key=_index_name)]
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8")

    @cached_property
    def schema_id(self) -> int:
        """First 8 bytes of SHA-256 of `canonical_bytes`, big-endian, top bit cleared (< 2**63)."""
        digest = hashlib.sha256(self.canonical_bytes()).digest()
        return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        """Column names in image order."""
        return tuple(c.name for c in self.columns)

    @cached_property
    def pk_indexes(self) -> tuple[int, ...]:
        """Positions of the primary-key columns in an image, in key order."""
        return tuple(self.column_names.index(k) for k in self.primary_key)

    def index_of(self, column: str) -> int:
        """Position of `column` in an image (ValueError if absent)."""
        return self.column_names.index(column)

    def image_dict(self, image: tuple[Value, ...]) -> dict[str, Value]:
        """An image as ``{column name: value}``; ValueError if its width is wrong."""
        if len(image) != len(self.columns):
            raise ValueError(
                f"image has {len(image)} values, {self.qualified} has {len(self.columns)} columns"
            )
        return dict(zip(self.column_names, image, strict=True))

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> TableSchema:
        """Inverse of `to_dict`."""
        cols = tuple(
            ColumnSchema(**{**c, "elements": tuple(c.get("elements", ()))}) for c in data["columns"]
        )
        indexes = tuple(
            IndexSchema(str(i["name"]), tuple(i["columns"]), bool(i["unique"]))
            for i in data.get("indexes", ())
        )
        return TableSchema(data["schema"], data["table"], cols, tuple(data["primary_key"]), indexes)

    @property
    def unique_keys(self) -> tuple[tuple[str, ...], ...]:
        """The UNIQUE indexes' columns."""
        return tuple(i.columns for i in self.indexes if i.unique)


@dataclass(frozen=True, slots=True, kw_only=True)
class RowChange:
    """An insert, update or delete of one row.

    Images are positional, in the column order of the `SchemaRecord` whose id is `schema_id`.
    An insert has only `after`, a delete only `before`, an update both.
    """

    source: str
    ts: int
    op: Op
    schema: str
    table: str
    schema_id: int
    primary_key: tuple[str, ...]
    before: tuple[Value, ...] | None
    after: tuple[Value, ...] | None
    txn: TxnRef
    position: BinlogPosition

    def __post_init__(self) -> None:
        want_before = self.op is not Op.INSERT and self.op is not Op.READ
        want_after = self.op is not Op.DELETE
        if (self.before is not None) != want_before or (self.after is not None) != want_after:
            raise ValueError(
                f"{self.op.value} of {self.schema}.{self.table} at {self.position}: "
                "an insert has only after, a delete only before, an update both"
            )
        if (
            self.before is not None
            and self.after is not None
            and (len(self.before) != len(self.after))
        ):
            raise ValueError(
                f"update of {self.schema}.{self.table} at {self.position}: before has "
                f"{len(self.before)} values, after {len(self.after)}"
            )

    @property
    def image(self) -> tuple[Value, ...]:
        """The row as it is after the change (before, for a delete): what keys are taken from."""
        img = self.after if self.after is not None else self.before
        assert img is not None
        return img

    def before_dict(self, table: TableSchema) -> dict[str, Value] | None:
        """The before image by column name, or None."""
        return None if self.before is None else table.image_dict(self.before)

    def after_dict(self, table: TableSchema) -> dict[str, Value] | None:
        """The after image by column name, or None."""
        return None if self.after is None else table.image_dict(self.after)


@dataclass(frozen=True, slots=True)
class StatementSession:
    """What a DDL ran under at the source (PROTOCOL.md §1.3), which a consumer that runs it
    sets first, as a replica does; a None field is unknown (the consumer's own)."""

    sql_mode: str | None = None
    timestamp_us: int | None = None
    time_zone: str | None = None


UNKNOWN = StatementSession()
"""A session of which nothing is known (an older writer's DDL): the consumer's own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DdlChange:
    """A DDL statement; `table_schema` is the table's schema after it (None if dropped, or if
    the statement touches no single table); `kind` what it does (None from a 1.0 writer:
    classify `statement` with `rowbus.protocol.ddl.parse_ddl`)."""

    source: str
    ts: int
    schema: str
    table: str | None
    statement: str
    table_schema: TableSchema | None
    position: BinlogPosition
    txn: TxnRef | None = None
    kind: DdlKind | None = None
    sql_mode: str | None = None
    """1.4: the source session's ``sql_mode`` when it ran the statement, as the server names
    it (``STRICT_TRANS_TABLES,NO_ZERO_DATE,…``; empty: none); None when unknown (an older
    writer, a snapshot's CREATE). A consumer runs the statement under it, as a replica does."""
    timestamp_us: int | None = None
    """1.4: the source's time when it ran the statement, in microseconds since the epoch (the
    session's ``TIMESTAMP``); None when unknown. A consumer runs the statement at that time, so
    a column added with ``DEFAULT CURRENT_TIMESTAMP`` holds the source's value in old rows."""
    time_zone: str | None = None
    """1.5: the source session's UTC offset when it ran the statement, ``+HH:MM`` or
    ``-HH:MM`` (a named zone or ``SYSTEM`` resolved by the source at `timestamp_us`); None
    when unknown. A consumer runs the statement in it, so a DATETIME filled with
    ``CURRENT_TIMESTAMP`` or a time literal reads as it did at the source."""

    @property
    def session(self) -> StatementSession:
        return StatementSession(self.sql_mode, self.timestamp_us, self.time_zone)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """Watermark: every event of `source` with a ts at or below `ts` is already in this
    partition."""

    source: str
    ts: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """The fake binlog: the reader is caught up to `position` at `ts`; also a watermark."""

    source: str
    ts: int
    reader_id: str
    position: BinlogPosition
    lag_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaRecord:
    """A table schema by id, on the compacted schemas topic (key: the id in decimal)."""

    schema_id: int
    table_schema: TableSchema
    source: str
    ts: int

    @staticmethod
    def of(table_schema: TableSchema, source: str, ts: int) -> SchemaRecord:
        """The record for `table_schema` under its own id."""
        return SchemaRecord(
            schema_id=table_schema.schema_id, table_schema=table_schema, source=source, ts=ts
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderCheckpoint:
    """A reader's committed position, on the compacted checkpoints topic (key: source).

    `offsets` holds, per (topic, partition) written, the next offset after this checkpoint's
    Kafka transaction. `epoch` grows each time a reader takes the source over.
    """

    source: str
    position: BinlogPosition
    gtid_set: str | None
    ts: int
    offsets: tuple[tuple[str, int, int], ...]
    reader_id: str
    epoch: int
    upstream_server: str | None = None
    """Which server `position` is a position of (MySQL's server_uuid, else ``server_id:N``);
    a reader resuming on another server (or after RESET MASTER) locates the checkpoint's GTID
    set there instead and raises the position's upstream (§9.4)."""
    snapshot: str | None = None
    """1.3: the reader's snapshot progress while it snapshots (tables, chunks done, the binlog
    position each key range was read at), as JSON text private to the reader; None when no
    snapshot is running. Consumers ignore it (PROTOCOL.md §9.5)."""


class ControlKind(Enum):
    """What a `ControlRecord` says about a shard-DDL lock. New kinds come with a minor version."""

    INTENT = "intent"
    DONE = "done"
    CONFLICT = "conflict"
    UNLOCK = "unlock"
    SKIP = "skip"
    OPERATOR_NOTE = "operator_note"


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """One step of shard-DDL coordination, on the control topic (key: lock_id)."""

    lock_id: str
    kind: ControlKind
    shard: str | None
    statement: str | None
    ts: int
    actor: str
    detail: str = field(default="")


class MarkerMode(Enum):
    """What a snapshot of one table replaces (PROTOCOL.md §9.7)."""

    REPLACE = "replace"
    """An initial or reset snapshot, read at one position before any streamed change of the
    table: at its end the table is exactly the rows seen since its begin."""
    REFRESH = "refresh"
    """An incremental snapshot read while the stream goes on: rows the stream changed
    meanwhile are the stream's; at its end a row neither read nor streamed since the begin is
    gone at the source."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotMarkerFields:
    """What both snapshot markers carry (PROTOCOL.md §9.7); never sent itself: an event is a
    `SnapshotBegin` or a `SnapshotEnd` (`snapshot_marker` builds either)."""

    source: str
    ts: int
    schema: str
    table: str
    snapshot: str
    """The snapshot's id, unique within the source (``snapshot:<n>:db.table``)."""
    mode: MarkerMode
    position: BinlogPosition
    txn: TxnRef


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotBegin(SnapshotMarkerFields):
    """1.5: a snapshot of `schema`.`table` begins (PROTOCOL.md §9.7). Broadcast to every
    partition of the table's topic like a DDL, before the table's definitions and first rows;
    `txn.index` counts on the snapshot's row counter, so its order key is below theirs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotEnd(SnapshotMarkerFields):
    """1.5: the snapshot `snapshot` of `schema`.`table` ended after `rows` read rows
    (PROTOCOL.md §9.7): a consumer deletes every row of the table whose key it has not seen
    since the matching `SnapshotBegin` (a keyless table was emptied at the begin)."""

    rows: int


def snapshot_marker(
    *,
    source: str,
    ts: int,
    schema: str,
    table: str,
    snapshot: str,
    mode: MarkerMode,
    position: BinlogPosition,
    txn: TxnRef,
    rows: int | None,
) -> SnapshotBegin | SnapshotEnd:
    """The one constructor of both markers: the begin with `rows` None, else the end after
    `rows` read rows (the reader and every codec build them here)."""
    fields: dict[str, Any] = {
        "source": source, "ts": ts, "schema": schema, "table": table, "snapshot": snapshot,
        "mode": mode, "position": position, "txn": txn,
    }  # fmt: skip
    if rows is None:
        return SnapshotBegin(**fields)
    return SnapshotEnd(**fields, rows=rows)


SnapshotMarker: TypeAlias = SnapshotBegin | SnapshotEnd
"""A snapshot marker: a barrier of one table, released in order like a DDL."""

Event: TypeAlias = RowChange | DdlChange | SnapshotBegin | SnapshotEnd | Resolved | Heartbeat


def order_key(
    event: RowChange | DdlChange | SnapshotBegin | SnapshotEnd,
) -> tuple[int, int, str, int, int]:
    """The de-duplication order key of a row or DDL (PROTOCOL.md §9): upstream, binlog file
    number (then name), offset, and index in the transaction. Strictly grows within a
    source, also across a switch to another upstream server (§9.4)."""
    pos = event.position
    index = event.txn.index if event.txn is not None else 0
    return (pos.upstream, pos.file_number, pos.file, pos.offset, index)


Record: TypeAlias = Event | SchemaRecord | ReaderCheckpoint | ControlRecord
