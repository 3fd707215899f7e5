"""The Avro encoding: the binary encoding of the union in `rowbus.avsc` (PROTOCOL.md §5.2).

No container file and no schema-registry prefix: the value is the bare Avro binary datum, whose
first varint is the union branch (the record kind). Images use the same kinds-and-arrays form
as protobuf; unsigned values above 2**63-1 travel as the long with the same 64 bits.
"""

from __future__ import annotations

import io
import json
from functools import singledispatch
from pathlib import Path
from typing import Any, cast

import fastavro

from rowbus.protocol.codec import fastpath
from rowbus.protocol.codec.jsonc import control_kind, ddl_kind, marker_mode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    BinlogPosition,
    ControlRecord,
    DdlChange,
    Heartbeat,
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

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "rowbus.avsc"
SCHEMA: Any = fastavro.parse_schema(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
WRITER_SCHEMAS: dict[str, Any] = {
    "1.0": fastavro.parse_schema(
        json.loads((SCHEMA_PATH.parent / "rowbus-1.0.avsc").read_text(encoding="utf-8"))
    ),
    "1.1": fastavro.parse_schema(
        json.loads((SCHEMA_PATH.parent / "rowbus-1.1.avsc").read_text(encoding="utf-8"))
    ),
    "1.2": fastavro.parse_schema(
        json.loads((SCHEMA_PATH.parent / "rowbus-1.2.avsc").read_text(encoding="utf-8"))
    ),
    "1.3": fastavro.parse_schema(
        json.loads((SCHEMA_PATH.parent / "rowbus-1.3.avsc").read_text(encoding="utf-8"))
    ),
    "1.4": fastavro.parse_schema(
        json.loads((SCHEMA_PATH.parent / "rowbus-1.4.avsc").read_text(encoding="utf-8"))
    ),
    "1.5": SCHEMA,
}
"""The Avro schema of each protocol version this decoder reads (each minor version adds fields
at record ends, with defaults, so an older datum resolves to this version's reader schema)."""
NAMESPACE = "rowbus.v1"
_TWO64 = 1 << 64
_write = fastavro.schemaless_writer
_read = fastavro.schemaless_reader


def encode(record: Record) -> bytes:
    """The Avro bytes of `record`."""
    name, datum = _to_avro(record)
    buf = io.BytesIO()
    try:
        _write(buf, SCHEMA, (f"{NAMESPACE}.{name}", datum))
    except (ValueError, TypeError, OverflowError, UnicodeEncodeError) as exc:
        raise ProtocolError(f"cannot encode {name} as Avro: {exc}") from None
    return buf.getvalue()


def decode(data: bytes, version: str | None = None) -> Record:
    """The record in Avro `data` (written with the schema of protocol `version`, default this
    one); ProtocolError if it is truncated or not a valid record."""
    buf = io.BytesIO(data)
    writer = SCHEMA if version is None else WRITER_SCHEMAS[version]
    try:
        read: Any = _read(
            buf,
            writer,
            None if writer is SCHEMA else SCHEMA,
            return_record_name=True,
            return_record_name_override=True,
        )
        name, datum = read
    except (EOFError, StopIteration, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Avro value does not decode ({type(exc).__name__}: {exc})") from None
    if buf.tell() != len(data):
        raise ProtocolError(f"Avro value has {len(data) - buf.tell()} bytes after the record")
    reader = _READERS.get(name.rpartition(".")[2])
    if reader is None:  # pragma: no cover - the schema admits no other record
        raise ProtocolError(f"unknown Avro record {name}")
    try:
        return cast(Record, reader(datum))
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"invalid {name}: {exc}") from None


# --- encoding ---------------------------------------------------------------------------------


def _image(values: tuple[Value, ...] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    c = fastpath.split(values)
    return {
        "kinds": c.kinds,
        "ints": c.ints,
        "uints": [u - _TWO64 for u in c.uints],
        "doubles": c.doubles,
        "strings": c.strings,
        "blobs": c.blobs,
    }


def _position(p: BinlogPosition) -> dict[str, Any]:
    return {"file": p.file, "offset": p.offset, "gtid": p.gtid, "upstream": p.upstream}


def _txn(t: TxnRef | None) -> dict[str, Any] | None:
    return None if t is None else {"id": t.id, "index": t.index, "count": t.count}


@singledispatch
def _to_avro(record: object) -> tuple[str, dict[str, Any]]:
    raise ProtocolError(f"{type(record).__name__} is not a rowbus record")


@_to_avro.register
def _(r: RowChange) -> tuple[str, dict[str, Any]]:
    return "RowChange", {
        "source": r.source,
        "ts": r.ts,
        "op": r.op.name,
        "schema": r.schema,
        "table": r.table,
        "schema_id": r.schema_id,
        "primary_key": r.primary_key,
        "before": _image(r.before),
        "after": _image(r.after),
        "txn": _txn(r.txn),
        "position": _position(r.position),
    }


@_to_avro.register
def _(r: DdlChange) -> tuple[str, dict[str, Any]]:
    return "DdlChange", {
        "source": r.source,
        "ts": r.ts,
        "schema": r.schema,
        "table": r.table,
        "statement": r.statement,
        "table_schema": None if r.table_schema is None else r.table_schema.to_dict(),
        "position": _position(r.position),
        "txn": _txn(r.txn),
        "kind": None if r.kind is None else r.kind.value,
        "sql_mode": r.sql_mode,
        "timestamp_us": r.timestamp_us,
        "time_zone": r.time_zone,
    }


def _marker(r: SnapshotBegin | SnapshotEnd) -> dict[str, Any]:
    return {
        "source": r.source,
        "ts": r.ts,
        "schema": r.schema,
        "table": r.table,
        "snapshot": r.snapshot,
        "mode": r.mode.value,
        "position": _position(r.position),
        "txn": _txn(r.txn),
    }


@_to_avro.register
def _(r: SnapshotBegin) -> tuple[str, dict[str, Any]]:
    return "SnapshotBegin", _marker(r)


@_to_avro.register
def _(r: SnapshotEnd) -> tuple[str, dict[str, Any]]:
    return "SnapshotEnd", {**_marker(r), "rows": r.rows}


@_to_avro.register
def _(r: Resolved) -> tuple[str, dict[str, Any]]:
    return "Resolved", {"source": r.source, "ts": r.ts}


@_to_avro.register
def _(r: Heartbeat) -> tuple[str, dict[str, Any]]:
    return "Heartbeat", {
        "source": r.source,
        "ts": r.ts,
        "reader_id": r.reader_id,
        "position": _position(r.position),
        "lag_ms": r.lag_ms,
    }


@_to_avro.register
def _(r: SchemaRecord) -> tuple[str, dict[str, Any]]:
    return "SchemaRecord", {
        "schema_id": r.schema_id,
        "table_schema": r.table_schema.to_dict(),
        "source": r.source,
        "ts": r.ts,
    }


@_to_avro.register
def _(r: ReaderCheckpoint) -> tuple[str, dict[str, Any]]:
    return "ReaderCheckpoint", {
        "source": r.source,
        "position": _position(r.position),
        "gtid_set": r.gtid_set,
        "ts": r.ts,
        "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in r.offsets],
        "reader_id": r.reader_id,
        "epoch": r.epoch,
        "upstream_server": r.upstream_server,
        "snapshot": r.snapshot,
    }


@_to_avro.register
def _(r: ControlRecord) -> tuple[str, dict[str, Any]]:
    return "ControlRecord", {
        "lock_id": r.lock_id,
        "kind": r.kind.value,
        "shard": r.shard,
        "statement": r.statement,
        "ts": r.ts,
        "actor": r.actor,
        "detail": r.detail,
    }


# --- decoding ---------------------------------------------------------------------------------


def _image_from(d: dict[str, Any] | None) -> tuple[Value, ...] | None:
    if d is None:
        return None
    uints = [u + _TWO64 if u < 0 else u for u in d["uints"]]
    return fastpath.join(d["kinds"], d["ints"], uints, d["doubles"], d["strings"], d["blobs"])


def _position_from(d: dict[str, Any]) -> BinlogPosition:
    return BinlogPosition(d["file"], d["offset"], d["gtid"], d.get("upstream", 0))


def _txn_from(d: dict[str, Any] | None) -> TxnRef | None:
    return None if d is None else TxnRef(d["id"], d["index"], d["count"])


def _row_from(d: dict[str, Any]) -> RowChange:
    txn = _txn_from(d["txn"])
    assert txn is not None
    return RowChange(
        source=d["source"],
        ts=d["ts"],
        op=Op[d["op"]],
        schema=d["schema"],
        table=d["table"],
        schema_id=d["schema_id"],
        primary_key=tuple(d["primary_key"]),
        before=_image_from(d["before"]),
        after=_image_from(d["after"]),
        txn=txn,
        position=_position_from(d["position"]),
    )


def _ddl_from(d: dict[str, Any]) -> DdlChange:
    table = d["table_schema"]
    return DdlChange(
        source=d["source"],
        ts=d["ts"],
        schema=d["schema"],
        table=d["table"],
        statement=d["statement"],
        table_schema=None if table is None else TableSchema.from_dict(table),
        position=_position_from(d["position"]),
        txn=_txn_from(d["txn"]),
        kind=ddl_kind(d["kind"]),
        sql_mode=d["sql_mode"],
        timestamp_us=d["timestamp_us"],
        time_zone=d["time_zone"],
    )


def _heartbeat_from(d: dict[str, Any]) -> Heartbeat:
    return Heartbeat(
        source=d["source"],
        ts=d["ts"],
        reader_id=d["reader_id"],
        position=_position_from(d["position"]),
        lag_ms=d["lag_ms"],
    )


def _schema_from(d: dict[str, Any]) -> SchemaRecord:
    return SchemaRecord(
        schema_id=d["schema_id"],
        table_schema=TableSchema.from_dict(d["table_schema"]),
        source=d["source"],
        ts=d["ts"],
    )


def _checkpoint_from(d: dict[str, Any]) -> ReaderCheckpoint:
    return ReaderCheckpoint(
        source=d["source"],
        position=_position_from(d["position"]),
        gtid_set=d["gtid_set"],
        ts=d["ts"],
        offsets=tuple((o["topic"], o["partition"], o["offset"]) for o in d["offsets"]),
        reader_id=d["reader_id"],
        epoch=d["epoch"],
        upstream_server=d.get("upstream_server"),
        snapshot=d.get("snapshot"),
    )


def _control_from(d: dict[str, Any]) -> ControlRecord:
    return ControlRecord(
        lock_id=d["lock_id"],
        kind=control_kind(d["kind"]),
        shard=d["shard"],
        statement=d["statement"],
        ts=d["ts"],
        actor=d["actor"],
        detail=d["detail"],
    )


def _marker_from(d: dict[str, Any], rows: int | None) -> SnapshotBegin | SnapshotEnd:
    txn = _txn_from(d["txn"])
    assert txn is not None  # the schema's txn is not nullable here
    return snapshot_marker(
        source=d["source"],
        ts=d["ts"],
        schema=d["schema"],
        table=d["table"],
        snapshot=d["snapshot"],
        mode=marker_mode(d["mode"]),
        position=_position_from(d["position"]),
        txn=txn,
        rows=rows,
    )


_READERS: dict[str, Any] = {
    "RowChange": _row_from,
    "DdlChange": _ddl_from,
    "Resolved": lambda d: Resolved(source=d["source"], ts=d["ts"]),
    "Heartbeat": _heartbeat_from,
    "SchemaRecord": _schema_from,
    "ReaderCheckpoint": _checkpoint_from,
    "ControlRecord": _control_from,
    "SnapshotBegin": lambda d: _marker_from(d, None),
    "SnapshotEnd": lambda d: _marker_from(d, d["rows"]),
}
