"""The JSON encoding: for people, kcat and languages without protobuf (PROTOCOL.md §5.3).

A value is one UTF-8 JSON object with exactly one member, named by the record kind, like the
protobuf Envelope's oneof: ``{"row": {...}}``. Row values map as PROTOCOL.md §4 says: null,
integers and strings as themselves, doubles as numbers with a fraction or exponent, everything
else as a one-member object tagged with its kind (``{"decimal": "12.34"}``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from functools import singledispatch
from typing import Any

from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    BinlogPosition,
    ControlKind,
    ControlRecord,
    DdlChange,
    Heartbeat,
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
    snapshot_marker,
)
from rowbus.protocol.values import (
    INT64_MIN,
    UINT64_MAX,
    Value,
    ZeroDate,
    format_time,
    kind_of,
    parse_time,
)

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode(record: Record) -> bytes:
    """The JSON bytes of `record`."""
    try:
        return _dumps(to_json(record)).encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {type(record).__name__} as JSON: {exc}") from None


def decode(data: bytes) -> Record:
    """The record in JSON `data`; ProtocolError if it is not a valid one."""
    try:
        obj = json.loads(data, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"value is not valid JSON: {exc}") from None
    return from_json(obj)


def to_json(record: Record) -> dict[str, Any]:
    """`record` as the JSON object its encoding writes."""
    return _to_json(record)


def from_json(obj: object) -> Record:
    """Inverse of `to_json`; ProtocolError if `obj` is not a valid record."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ProtocolError("a JSON record is an object with exactly one member, its kind")
    ((kind, body),) = obj.items()
    reader = _READERS.get(kind)
    if reader is None:
        raise ProtocolError(f"unknown event kind {kind!r}")
    if not isinstance(body, dict):
        raise ProtocolError(f"JSON {kind} is not an object")
    try:
        return reader(body)
    except ProtocolError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"invalid JSON {kind}: {type(exc).__name__}: {exc}") from None


# --- values -----------------------------------------------------------------------------------


def value_to_json(v: Value) -> Any:
    """One value in its JSON form (PROTOCOL.md §4)."""
    kind_of(v)  # validates
    match v:
        case None | int() | str():
            return v
        case float():
            return v
        case Decimal():
            return {"decimal": str(v)}
        case bytes():
            return {"base64": base64.b64encode(v).decode("ascii")}
        case dt.datetime() if v.tzinfo is None:
            return {"datetime": v.isoformat()}
        case dt.datetime():
            return {"timestamp": v.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"}
        case dt.date():
            return {"date": v.isoformat()}
        case dt.timedelta():
            return {"time": format_time(v)}
        case frozenset():
            return {"set": sorted(v)}
        case ZeroDate():
            return {"zero_date": v.text}
    raise ProtocolError(f"{type(v).__name__} is not a rowbus value")  # pragma: no cover


def value_from_json(x: Any) -> Value:
    """Inverse of `value_to_json`."""
    t = type(x)
    if x is None or t is str:
        return x  # type: ignore[no-any-return]
    if t is int:
        if not INT64_MIN <= x <= UINT64_MAX:
            raise ProtocolError(f"integer {x} does not fit in 64 bits")
        return x  # type: ignore[no-any-return]
    if t is float:
        if not math.isfinite(x):
            raise ProtocolError(f"number {x} is not finite")
        return x  # type: ignore[no-any-return]
    if t is dict and len(x) == 1:
        ((tag, text),) = x.items()
        parse = _TAGGED.get(tag)
        if parse is None:
            raise ProtocolError(f"unknown value tag {tag!r}")
        return parse(text)
    raise ProtocolError(f"{_dumps(x)[:40]} is not a rowbus JSON value")


def _tagged_str(text: object, what: str) -> str:
    if type(text) is not str:
        raise ProtocolError(f"{what} must be a JSON string")
    return text


def _decimal(text: object) -> Decimal:
    try:
        d = Decimal(_tagged_str(text, "decimal"))
    except InvalidOperation:
        raise ProtocolError(f"malformed decimal {text!r}") from None
    if not d.is_finite():
        raise ProtocolError(f"decimal {text!r} is not finite")
    return d


def _bytes(text: object) -> bytes:
    try:
        return base64.b64decode(_tagged_str(text, "base64"), validate=True)
    except binascii.Error:
        raise ProtocolError(f"malformed base64 {text!r}") from None


def _date(text: object) -> dt.date:
    try:
        return dt.date.fromisoformat(_tagged_str(text, "date"))
    except ValueError:
        raise ProtocolError(f"malformed date {text!r}") from None


def _datetime(text: object) -> dt.datetime:
    try:
        v = dt.datetime.fromisoformat(_tagged_str(text, "datetime"))
    except ValueError:
        raise ProtocolError(f"malformed datetime {text!r}") from None
    if v.tzinfo is not None:
        raise ProtocolError(f"datetime {text!r} has a zone; a DATETIME is a wall clock")
    return v


def _timestamp(text: object) -> dt.datetime:
    s = _tagged_str(text, "timestamp")
    if not s.endswith("Z"):
        raise ProtocolError(f"timestamp {s!r} must end with Z (UTC)")
    try:
        return dt.datetime.fromisoformat(s[:-1]).replace(tzinfo=dt.UTC)
    except ValueError:
        raise ProtocolError(f"malformed timestamp {text!r}") from None


def _set(members: object) -> frozenset[str]:
    if type(members) is not list or not all(type(m) is str for m in members):
        raise ProtocolError("a SET is a JSON array of strings")
    return frozenset(members)


_TAGGED: dict[str, Callable[[Any], Value]] = {
    "decimal": _decimal,
    "base64": _bytes,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _timestamp,
    "time": lambda text: parse_time(_tagged_str(text, "time")),
    "set": _set,
    "zero_date": lambda text: ZeroDate(_tagged_str(text, "zero_date")),
}


def _no_constant(name: str) -> None:
    raise ProtocolError(f"JSON constant {name} is not a value")


def _image(img: tuple[Value, ...] | None) -> list[Any] | None:
    return None if img is None else [value_to_json(v) for v in img]


def _image_from(x: Any) -> tuple[Value, ...] | None:
    if x is None:
        return None
    if type(x) is not list:
        raise ProtocolError("a row image is a JSON array")
    return tuple(value_from_json(v) for v in x)


# --- records ----------------------------------------------------------------------------------


def _position(p: BinlogPosition) -> dict[str, Any]:
    out = {"file": p.file, "offset": p.offset, "gtid": p.gtid}
    if p.upstream:  # 1.2; absent means 0
        out["upstream"] = p.upstream
    return out


def _position_from(d: Mapping[str, Any]) -> BinlogPosition:
    return BinlogPosition(
        _str(d["file"]), _int(d["offset"]), _opt_str(d.get("gtid")), _int(d.get("upstream", 0))
    )


def _txn(t: TxnRef | None) -> dict[str, Any] | None:
    return None if t is None else {"id": t.id, "index": t.index, "count": t.count}


def _txn_from(d: Mapping[str, Any]) -> TxnRef:
    count = d.get("count")
    return TxnRef(_str(d["id"]), _int(d["index"]), None if count is None else _int(count))


def _str(x: object) -> str:
    if type(x) is not str:
        raise ProtocolError(f"expected a string, got {type(x).__name__}")
    return x


def _opt_str(x: object) -> str | None:
    return None if x is None else _str(x)


def _int(x: object) -> int:
    if type(x) is not int:
        raise ProtocolError(f"expected an integer, got {type(x).__name__}")
    return x


@singledispatch
def _to_json(record: object) -> dict[str, Any]:
    raise ProtocolError(f"{type(record).__name__} is not a rowbus record")


@_to_json.register
def _(r: RowChange) -> dict[str, Any]:
    return {
        "row": {
            "source": r.source,
            "ts": r.ts,
            "op": r.op.value,
            "schema": r.schema,
            "table": r.table,
            "schema_id": r.schema_id,
            "primary_key": list(r.primary_key),
            "before": _image(r.before),
            "after": _image(r.after),
            "txn": _txn(r.txn),
            "position": _position(r.position),
        }
    }


@_to_json.register
def _(r: DdlChange) -> dict[str, Any]:
    return {
        "ddl": {
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


@_to_json.register
def _(r: SnapshotBegin) -> dict[str, Any]:
    return {"snapshot_begin": _marker(r)}


@_to_json.register
def _(r: SnapshotEnd) -> dict[str, Any]:
    return {"snapshot_end": {**_marker(r), "rows": r.rows}}


@_to_json.register
def _(r: Resolved) -> dict[str, Any]:
    return {"resolved": {"source": r.source, "ts": r.ts}}


@_to_json.register
def _(r: Heartbeat) -> dict[str, Any]:
    return {
        "heartbeat": {
            "source": r.source,
            "ts": r.ts,
            "reader_id": r.reader_id,
            "position": _position(r.position),
            "lag_ms": r.lag_ms,
        }
    }


@_to_json.register
def _(r: SchemaRecord) -> dict[str, Any]:
    return {
        "schema": {
            "schema_id": r.schema_id,
            "table_schema": r.table_schema.to_dict(),
            "source": r.source,
            "ts": r.ts,
        }
    }


@_to_json.register
def _(r: ReaderCheckpoint) -> dict[str, Any]:
    return {
        "checkpoint": {
            "source": r.source,
            "position": _position(r.position),
            "gtid_set": r.gtid_set,
            "ts": r.ts,
            "offsets": [{"topic": t, "partition": p, "offset": o} for t, p, o in r.offsets],
            "reader_id": r.reader_id,
            "epoch": r.epoch,
            **({"upstream_server": r.upstream_server} if r.upstream_server is not None else {}),
            **({"snapshot": r.snapshot} if r.snapshot is not None else {}),
        }
    }


@_to_json.register
def _(r: ControlRecord) -> dict[str, Any]:
    return {
        "control": {
            "lock_id": r.lock_id,
            "kind": r.kind.value,
            "shard": r.shard,
            "statement": r.statement,
            "ts": r.ts,
            "actor": r.actor,
            "detail": r.detail,
        }
    }


def _row_from(d: Mapping[str, Any]) -> RowChange:
    try:
        op = Op(d["op"])
    except ValueError:
        raise ProtocolError(f"unknown row op {d['op']!r}") from None
    return RowChange(
        source=_str(d["source"]),
        ts=_int(d["ts"]),
        op=op,
        schema=_str(d["schema"]),
        table=_str(d["table"]),
        schema_id=_int(d["schema_id"]),
        primary_key=tuple(_str(k) for k in d["primary_key"]),
        before=_image_from(d.get("before")),
        after=_image_from(d.get("after")),
        txn=_txn_from(d["txn"]),
        position=_position_from(d["position"]),
    )


_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "type": (str,),
    "unsigned": (bool,),
    "nullable": (bool,),
    "length": (int, type(None)),
    "precision": (int, type(None)),
    "scale": (int, type(None)),
    "fsp": (int, type(None)),
    "charset": (str, type(None)),
    "elements": (list,),
    "default": (str, type(None)),
    "collation": (str, type(None)),
}


def _table_from(d: Any) -> TableSchema | None:
    if d is None:
        return None
    if type(d) is not dict or type(d.get("columns")) is not list:
        raise ProtocolError("a table schema is an object with a columns array")
    for col in d["columns"]:
        if type(col) is not dict:
            raise ProtocolError("a column is a JSON object")
        for name, value in col.items():
            want = _COLUMN_TYPES.get(name)
            if want is None:
                continue  # a field of a later minor version
            if type(value) not in want or (
                name == "elements" and not all(type(e) is str for e in value)
            ):
                raise ProtocolError(f"column field {name!r} has a wrong type: {value!r}")
    _str(d.get("schema"))
    _str(d.get("table"))
    if type(d.get("primary_key")) is not list:
        raise ProtocolError("primary_key is a JSON array")
    pk = tuple(_str(k) for k in d["primary_key"])
    indexes = d.get("indexes", [])
    if type(indexes) is not list or not all(
        type(i) is dict
        and type(i.get("name")) is str
        and type(i.get("unique")) is bool
        and type(i.get("columns")) is list
        and all(type(c) is str for c in i["columns"])
        for i in indexes
    ):
        raise ProtocolError("indexes is an array of {name, columns, unique}")
    cols = [{k: v for k, v in c.items() if k in _COLUMN_TYPES} for c in d["columns"]]
    return TableSchema.from_dict({**d, "columns": cols, "primary_key": pk})


def _ddl_from(d: Mapping[str, Any]) -> DdlChange:
    txn = d.get("txn")
    return DdlChange(
        source=_str(d["source"]),
        ts=_int(d["ts"]),
        schema=_str(d["schema"]),
        table=_opt_str(d.get("table")),
        statement=_str(d["statement"]),
        table_schema=_table_from(d.get("table_schema")),
        position=_position_from(d["position"]),
        txn=None if txn is None else _txn_from(txn),
        kind=ddl_kind(_opt_str(d.get("kind"))),
        sql_mode=_opt_str(d.get("sql_mode")),
        timestamp_us=None if d.get("timestamp_us") is None else _int(d["timestamp_us"]),
        time_zone=_opt_str(d.get("time_zone")),
    )


def ddl_kind(name: str | None) -> DdlKind | None:
    """The DdlKind named `name`; None when absent or a kind of a later minor version (the
    consumer then classifies the statement itself)."""
    if name is None:
        return None
    try:
        return DdlKind(name)
    except ValueError:
        return None


def _heartbeat_from(d: Mapping[str, Any]) -> Heartbeat:
    return Heartbeat(
        source=_str(d["source"]),
        ts=_int(d["ts"]),
        reader_id=_str(d["reader_id"]),
        position=_position_from(d["position"]),
        lag_ms=_int(d["lag_ms"]),
    )


def _schema_from(d: Mapping[str, Any]) -> SchemaRecord:
    table = _table_from(d["table_schema"])
    if table is None:
        raise ProtocolError("a schema record needs its table schema")
    return SchemaRecord(
        schema_id=_int(d["schema_id"]),
        table_schema=table,
        source=_str(d["source"]),
        ts=_int(d["ts"]),
    )


def _checkpoint_from(d: Mapping[str, Any]) -> ReaderCheckpoint:
    return ReaderCheckpoint(
        source=_str(d["source"]),
        position=_position_from(d["position"]),
        gtid_set=_opt_str(d.get("gtid_set")),
        ts=_int(d["ts"]),
        offsets=tuple(
            (_str(o["topic"]), _int(o["partition"]), _int(o["offset"])) for o in d["offsets"]
        ),
        reader_id=_str(d["reader_id"]),
        epoch=_int(d["epoch"]),
        upstream_server=_opt_str(d.get("upstream_server")),
        snapshot=_opt_str(d.get("snapshot")),
    )


def marker_mode(name: object) -> MarkerMode:
    """The MarkerMode named `name`; ProtocolError for a mode this version does not know."""
    try:
        return MarkerMode(name)
    except ValueError:
        raise ProtocolError(f"unknown snapshot marker mode {name!r}") from None


def _marker_from(d: Mapping[str, Any], rows: int | None) -> SnapshotBegin | SnapshotEnd:
    return snapshot_marker(
        source=_str(d["source"]),
        ts=_int(d["ts"]),
        schema=_str(d["schema"]),
        table=_str(d["table"]),
        snapshot=_str(d["snapshot"]),
        mode=marker_mode(d["mode"]),
        position=_position_from(d["position"]),
        txn=_txn_from(d["txn"]),
        rows=rows,
    )


def control_kind(name: object) -> ControlKind:
    """The ControlKind named `name`; ProtocolError for a kind this version does not know."""
    try:
        return ControlKind(name)
    except ValueError:
        raise ProtocolError(f"unknown control kind {name!r}") from None


def _control_from(d: Mapping[str, Any]) -> ControlRecord:
    return ControlRecord(
        lock_id=_str(d["lock_id"]),
        kind=control_kind(d["kind"]),
        shard=_opt_str(d.get("shard")),
        statement=_opt_str(d.get("statement")),
        ts=_int(d["ts"]),
        actor=_str(d["actor"]),
        detail=_str(d.get("detail", "")),
    )


_READERS: dict[str, Callable[[Mapping[str, Any]], Record]] = {
    "row": _row_from,
    "ddl": _ddl_from,
    "resolved": lambda d: Resolved(source=_str(d["source"]), ts=_int(d["ts"])),
    "heartbeat": _heartbeat_from,
    "schema": _schema_from,
    "checkpoint": _checkpoint_from,
    "control": _control_from,
    "snapshot_begin": lambda d: _marker_from(d, None),
    "snapshot_end": lambda d: _marker_from(d, _int(d["rows"])),
}
