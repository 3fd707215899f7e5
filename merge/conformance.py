"""rowbus's own answers to the conformance kit (`rowbus.protocol.conformance`, PROTOCOL.md §10):
``python -m rowbus.merge.conformance`` reads JSON-line requests on stdin and answers each on
stdout with the reference decoder, key and schema-id functions and `Merger`, and the tables the
released stream leaves (`rowbus.merge.tables`). It is what a third party's program is compared
with, and the kit's own test runs it."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

from rowbus.merge.merger import Merger
from rowbus.merge.tables import Tables
from rowbus.protocol.codec import decode
from rowbus.protocol.codec.jsonc import to_json, value_from_json
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    DdlChange,
    Heartbeat,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
)
from rowbus.protocol.partition import encode_key, java_partition, murmur2


def _headers(headers: Mapping[str, str]) -> list[tuple[str, bytes | None]]:
    return [(k, v.encode("utf-8")) for k, v in headers.items()]


def _decode(request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        record = decode(
            base64.b64decode(request["value"]),
            _headers(request["headers"]),
            str(request.get("position", "?")),
        )
    except ProtocolError as exc:
        return {"error": str(exc)}
    return {"record": to_json(record)}


def _key(request: Mapping[str, Any]) -> dict[str, Any]:
    key = encode_key(
        request["schema"], request["table"], [value_from_json(v) for v in request["values"]]
    )
    return {
        "key": key.decode("utf-8"),
        "murmur2": murmur2(key),
        "partitions": {str(n): java_partition(key, n) for n in request["partitions"]},
    }


def _schema_id(request: Mapping[str, Any]) -> dict[str, Any]:
    table = TableSchema.from_dict(request["table_schema"])
    return {"canonical": table.canonical_bytes().decode("utf-8"), "schema_id": table.schema_id}


def released(
    lanes: Iterable[list[Any]], records: Iterable[Mapping[str, Any]]
) -> tuple[list[Any], dict[str, list[Any]]]:
    """Every transaction the merger releases from `records`, in order, as §10 names them; and
    the tables they leave, applied in that order."""
    merger = Merger([(str(t), int(p), str(s)) for t, p, s in lanes])
    tables = Tables()
    out: list[Any] = []
    try:
        for r in records:
            event = decode(base64.b64decode(r["value"]), _headers(r["headers"]), "merge")
            if isinstance(
                event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd | Resolved | Heartbeat
            ):
                merger.push(r["topic"], int(r["partition"]), int(r["offset"]), event)
        for _ in range(1_000_000):
            batch = merger.release(until_ddl=True)
            if not batch:
                break
            for txn in batch:
                tables.apply(txn.events)
                out.append(
                    {
                        "source": txn.source,
                        "events": [
                            [e.position.file, e.position.offset, e.txn.index if e.txn else None]
                            for e in txn.events
                        ],
                    }
                )
    finally:
        merger.close()
    return out, tables.as_json()


def _merge(request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        order, tables = released(request["lanes"], request["records"])
    except ValueError as exc:  # a keyless delete of a row the table does not hold
        return {"error": str(exc)}
    return {"released": order, "tables": tables}


OPS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "decode": _decode,
    "key": _key,
    "schema_id": _schema_id,
    "merge": _merge,
}


def serve(lines: Iterable[str], out: TextIO) -> None:
    """Answer each request line on `out`, one line each."""
    for line in lines:
        request = json.loads(line)
        handler = OPS.get(request.get("op"))
        answer = handler(request) if handler else {"error": f"unknown op {request.get('op')!r}"}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
