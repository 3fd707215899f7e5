"""The protobuf encoding (the default): `rowbus.proto`'s Envelope plus a CRC-32 trailer.

Generated classes stay in this module; callers see only dataclasses.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

from google.protobuf.message import DecodeError

from rowbus.protocol._generated import rowbus_pb2 as pb
from rowbus.protocol.codec import construct, fastpath
from rowbus.protocol.codec.jsonc import control_kind, ddl_kind, marker_mode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    ControlRecord,
    DdlChange,
    Heartbeat,
    IndexSchema,
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
    snapshot_marker,
)
from rowbus.protocol.values import Value

CRC_TAG = b"\x7d"  # field 15, wire type 5 (fixed32)
_OP_FROM_PB = {
    pb.OP_INSERT: Op.INSERT,
    pb.OP_UPDATE: Op.UPDATE,
    pb.OP_DELETE: Op.DELETE,
    pb.OP_READ: Op.READ,
}
_OP_TO_PB = {op.value: n for n, op in _OP_FROM_PB.items()}  # by value: Enum hashing is slow
_crc32 = zlib.crc32
_trailer = struct.Struct("<BI").pack
_crc_at = struct.Struct("<I").unpack_from
_from_string = pb.Envelope.FromString
_split = fastpath.split
_join = fastpath.join
_R = TypeVar("_R")
ImageBuilder = Callable[..., tuple[Any, ...]]
"""(kinds, ints, uints, doubles, strings, blobs) → an image (`fastpath.join`: the values)."""
_Envelope = pb.Envelope


def encode(record: Record) -> bytes:
    """The value bytes of `record`."""
    env = _Envelope()
    try:
        _fill(record, env)
        body = env.SerializeToString()
    except ValueError as exc:  # upb: a string that is not UTF-8, an int out of range
        raise ProtocolError(f"cannot encode {type(record).__name__}: {exc}") from None
    return body + _trailer(0x7D, _crc32(body))


def decode(data: bytes, image: ImageBuilder | None = None) -> Record:
    """The record in `data`; ProtocolError if it is truncated, corrupt or of an unknown kind.

    `image`: builds a row's images from their wire columns instead of the values (a consumer
    that only renders them; it must raise what the values' decoding raises, or decode them)."""
    end = len(data) - 5
    if end < 0 or data[end] != 0x7D:
        raise ProtocolError("protobuf value is truncated (no CRC trailer)")
    body = data[:end]
    if _crc32(body) != _crc_at(data, end + 1)[0]:
        raise ProtocolError("protobuf value is corrupt or truncated (CRC mismatch)")
    try:
        env = _from_string(body)
    except DecodeError as exc:
        raise ProtocolError(f"protobuf value does not parse: {exc}") from None
    kind = env.WhichOneof("body")
    try:
        match kind:
            case "row":
                return _row_from(env.row, image or _join)
            case "ddl":
                return _ddl_from(env.ddl)
            case "resolved":
                return Resolved(source=env.resolved.source, ts=env.resolved.ts)
            case "heartbeat":
                return _heartbeat_from(env.heartbeat)
            case "schema":
                return _schema_record_from(env.schema)
            case "checkpoint":
                return _checkpoint_from(env.checkpoint)
            case "control":
                return _control_from(env.control)
            case "snapshot_begin":
                return _marker_from(env.snapshot_begin, None)
            case "snapshot_end":
                return _marker_from(env.snapshot_end, env.snapshot_end.rows)
            case _:
                raise ProtocolError("unknown or missing event kind in protobuf Envelope")
    except (ValueError, TypeError) as exc:  # dataclass invariants
        raise ProtocolError(f"invalid {kind}: {exc}") from None


# --- encoding ---------------------------------------------------------------------------------


_FILLERS: dict[type, Callable[[Any, Any], None]] = {}


def _fill(record: object, env: Any) -> None:
    try:
        filler = _FILLERS[type(record)]
    except KeyError:
        raise ProtocolError(f"{type(record).__name__} is not a rowbus record") from None
    filler(record, env)


def _filler(fn: Callable[[_R, Any], None]) -> Callable[[_R, Any], None]:
    """Register `fn` as the filler of the record type its first parameter names."""
    _FILLERS[get_type_hints(fn)["r"]] = fn
    return fn


@_filler
def _(r: RowChange, env: Any) -> None:
    m = env.row
    m.source = r.source
    m.ts = r.ts
    m.op = _OP_TO_PB[r.op._value_]
    m.schema = r.schema
    m.table = r.table
    m.schema_id = r.schema_id
    m.primary_key.extend(r.primary_key)
    if r.before is not None:
        _image_to(r.before, m.before)
    if r.after is not None:
        _image_to(r.after, m.after)
    _txn_to(r.txn, m.txn)
    _position_to(r.position, m.position)


@_filler
def _(r: DdlChange, env: Any) -> None:
    m = env.ddl
    m.source = r.source
    m.ts = r.ts
    m.schema = r.schema
    if r.table is not None:
        m.table = r.table
    m.statement = r.statement
    if r.table_schema is not None:
        _table_to(r.table_schema, m.table_schema)
    _position_to(r.position, m.position)
    if r.txn is not None:
        _txn_to(r.txn, m.txn)
    if r.kind is not None:
        m.kind = r.kind.value
    if r.sql_mode is not None:
        m.sql_mode = r.sql_mode
    if r.timestamp_us is not None:
        m.timestamp_us = r.timestamp_us
    if r.time_zone is not None:
        m.time_zone = r.time_zone


def _marker_to(r: SnapshotBegin | SnapshotEnd, m: Any) -> None:
    m.source = r.source
    m.ts = r.ts
    m.schema = r.schema
    m.table = r.table
    m.snapshot = r.snapshot
    m.mode = r.mode.value
    _position_to(r.position, m.position)
    _txn_to(r.txn, m.txn)


@_filler
def _(r: SnapshotBegin, env: Any) -> None:
    _marker_to(r, env.snapshot_begin)


@_filler
def _(r: SnapshotEnd, env: Any) -> None:
    _marker_to(r, env.snapshot_end)
    env.snapshot_end.rows = r.rows


@_filler
def _(r: Resolved, env: Any) -> None:
    env.resolved.source = r.source
    env.resolved.ts = r.ts


@_filler
def _(r: Heartbeat, env: Any) -> None:
    m = env.heartbeat
    m.source = r.source
    m.ts = r.ts
    m.reader_id = r.reader_id
    _position_to(r.position, m.position)
    m.lag_ms = r.lag_ms


@_filler
def _(r: SchemaRecord, env: Any) -> None:
    m = env.schema
    m.schema_id = r.schema_id
    _table_to(r.table_schema, m.table_schema)
    m.source = r.source
    m.ts = r.ts


@_filler
def _(r: ReaderCheckpoint, env: Any) -> None:
    m = env.checkpoint
    m.source = r.source
    _position_to(r.position, m.position)
    if r.gtid_set is not None:
        m.gtid_set = r.gtid_set
    m.ts = r.ts
    for topic, partition, offset in r.offsets:
        m.offsets.add(topic=topic, partition=partition, offset=offset)
    m.reader_id = r.reader_id
    m.epoch = r.epoch
    if r.upstream_server is not None:
        m.upstream_server = r.upstream_server
    if r.snapshot is not None:
        m.snapshot = r.snapshot


@_filler
def _(r: ControlRecord, env: Any) -> None:
    m = env.control
    m.lock_id = r.lock_id
    m.kind = r.kind.value
    if r.shard is not None:
        m.shard = r.shard
    if r.statement is not None:
        m.statement = r.statement
    m.ts = r.ts
    m.actor = r.actor
    m.detail = r.detail


def _image_to(values: tuple[Value, ...], m: Any) -> None:
    kinds, ints, uints, doubles, strings, blobs = _split(values)
    m.kinds = kinds
    if ints:
        m.ints.extend(ints)
    if strings:
        m.strings.extend(strings)
    if doubles:
        m.doubles.extend(doubles)
    if blobs:
        m.blobs.extend(blobs)
    if uints:
        m.uints.extend(uints)


def _txn_to(t: TxnRef, m: Any) -> None:
    m.id = t.id
    m.index = t.index
    if t.count is not None:
        m.count = t.count


def _position_to(p: BinlogPosition, m: Any) -> None:
    m.file = p.file
    m.offset = p.offset
    if p.gtid is not None:
        m.gtid = p.gtid
    if p.upstream:
        m.upstream = p.upstream


def _table_to(t: TableSchema, m: Any) -> None:
    m.schema = t.schema
    m.table = t.table
    for c in t.columns:
        col = m.columns.add(name=c.name, type=c.type, unsigned=c.unsigned, nullable=c.nullable)
        for attr in ("length", "precision", "scale", "fsp", "charset", "collation"):
            val = getattr(c, attr)
            if val is not None:
                setattr(col, attr, val)
        col.elements.extend(c.elements)
        if c.default is not None:
            col.default_value = c.default
    m.primary_key.extend(t.primary_key)
    for i in t.indexes:
        m.indexes.add(name=i.name, columns=i.columns, unique=i.unique)


# --- decoding ---------------------------------------------------------------------------------


def _row_from(m: Any, image: ImageBuilder) -> RowChange:
    op = _OP_FROM_PB.get(m.op)
    if op is None:
        raise ProtocolError(f"unknown row op {m.op}")
    t = m.txn
    p = m.position
    return construct.row_change(
        m.source,
        m.ts,
        op,
        m.schema,
        m.table,
        m.schema_id,
        tuple(m.primary_key),
        _image_from(m.before, image) if m.HasField("before") else None,
        _image_from(m.after, image) if m.HasField("after") else None,
        construct.txn_ref(t.id, t.index, t.count if t.HasField("count") else None),
        construct.binlog_position(
            p.file, p.offset, p.gtid if p.HasField("gtid") else None, p.upstream
        ),
    )


def _image_from(m: Any, image: ImageBuilder = _join) -> tuple[Value, ...]:
    return image(m.kinds, m.ints, m.uints, m.doubles, m.strings, m.blobs)


def _txn_from(m: Any) -> TxnRef:
    return TxnRef(m.id, m.index, m.count if m.HasField("count") else None)


def _position_from(m: Any) -> BinlogPosition:
    return BinlogPosition(m.file, m.offset, m.gtid if m.HasField("gtid") else None, m.upstream)


def _table_from(m: Any) -> TableSchema:
    cols = tuple(
        ColumnSchema(
            name=c.name,
            type=c.type,
            unsigned=c.unsigned,
            nullable=c.nullable,
            length=c.length if c.HasField("length") else None,
            precision=c.precision if c.HasField("precision") else None,
            scale=c.scale if c.HasField("scale") else None,
            fsp=c.fsp if c.HasField("fsp") else None,
            charset=c.charset if c.HasField("charset") else None,
            elements=tuple(c.elements),
            default=c.default_value if c.HasField("default_value") else None,
            collation=c.collation if c.HasField("collation") else None,
        )
        for c in m.columns
    )
    indexes = tuple(IndexSchema(i.name, tuple(i.columns), i.unique) for i in m.indexes)
    return TableSchema(m.schema, m.table, cols, tuple(m.primary_key), indexes)


def _ddl_from(m: Any) -> DdlChange:
    return DdlChange(
        source=m.source,
        ts=m.ts,
        schema=m.schema,
        table=m.table if m.HasField("table") else None,
        statement=m.statement,
        table_schema=_table_from(m.table_schema) if m.HasField("table_schema") else None,
        position=_position_from(m.position),
        txn=_txn_from(m.txn) if m.HasField("txn") else None,
        kind=ddl_kind(m.kind) if m.HasField("kind") else None,
        sql_mode=m.sql_mode if m.HasField("sql_mode") else None,
        timestamp_us=m.timestamp_us if m.HasField("timestamp_us") else None,
        time_zone=m.time_zone if m.HasField("time_zone") else None,
    )


def _marker_from(m: Any, rows: int | None) -> SnapshotBegin | SnapshotEnd:
    return snapshot_marker(
        source=m.source,
        ts=m.ts,
        schema=m.schema,
        table=m.table,
        snapshot=m.snapshot,
        mode=marker_mode(m.mode),
        position=_position_from(m.position),
        txn=_txn_from(m.txn),
        rows=rows,
    )


def _heartbeat_from(m: Any) -> Heartbeat:
    return Heartbeat(
        source=m.source,
        ts=m.ts,
        reader_id=m.reader_id,
        position=_position_from(m.position),
        lag_ms=m.lag_ms,
    )


def _schema_record_from(m: Any) -> SchemaRecord:
    return SchemaRecord(
        schema_id=m.schema_id, table_schema=_table_from(m.table_schema), source=m.source, ts=m.ts
    )


def _checkpoint_from(m: Any) -> ReaderCheckpoint:
    return ReaderCheckpoint(
        source=m.source,
        position=_position_from(m.position),
        gtid_set=m.gtid_set if m.HasField("gtid_set") else None,
        ts=m.ts,
        offsets=tuple((o.topic, o.partition, o.offset) for o in m.offsets),
        reader_id=m.reader_id,
        epoch=m.epoch,
        upstream_server=m.upstream_server if m.HasField("upstream_server") else None,
        snapshot=m.snapshot if m.HasField("snapshot") else None,
    )


def _control_from(m: Any) -> ControlRecord:
    return ControlRecord(
        lock_id=m.lock_id,
        kind=control_kind(m.kind),
        shard=m.shard if m.HasField("shard") else None,
        statement=m.statement if m.HasField("statement") else None,
        ts=m.ts,
        actor=m.actor,
        detail=m.detail,
    )
