"""`rowbus verify` against the Iceberg sink's current-state tables (``apply.sink_kind: iceberg``).

An Iceberg table has no server to compute checksums, so a target is compared row by row: the
table read whole through the catalog (one scan of its current snapshot), each shard read whole
in its consistent snapshot, every source value taken to what the sink stores for it (the type
table of spark_apply README "The Iceberg sink": TIME as microseconds, BIGINT UNSIGNED and BIT
as numbers, SET as its members, FLOAT as its binary32 value, TIMESTAMP in UTC, zero dates as
NULL). The report is the MySQL comparison's (`TableDiff`, one chunk per table). A table without
a primary key (no identifier fields, PROTOCOL.md §9.3) is compared as a multiset of rows.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from rowbus.exceptions import VerifyError
from rowbus.verify.checksum import Chunk, Key, TableRef, all_rows, columns, primary_key, rows
from rowbus.verify.compare import TableDiff, _add


def compare_iceberg(
    name: str, table: Any | None, shards: Sequence[TableRef], max_keys: int = 100
) -> TableDiff:
    """Compare the Iceberg table `table` (None: it does not exist) with its shards."""
    diff = TableDiff(f"iceberg:{name}", [str(s) for s in shards])
    if table is None:
        diff.error = "the Iceberg table does not exist"
        return diff
    schema = table.schema()
    fields = list(schema.fields)
    cols = [f.name for f in fields]
    key = [schema.find_field(i).name for i in schema.identifier_field_ids]
    types = [str(f.field_type) for f in fields]
    for shard in shards:
        missing = [
            c
            for c, own in zip(cols, shard.physical(cols), strict=True)
            if own not in columns(shard)
        ]
        if missing:
            raise VerifyError(
                f"{shard} has no column for {missing} of {diff.target}; check the route's "
                "include, exclude and rename"
            )
        with shard.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP values as UTC, as stored
    if not key:
        if any(primary_key(shard) for shard in shards):
            diff.error = "the Iceberg table has no identifier fields (not a current-state table)"
        else:  # a table without a primary key (PROTOCOL.md §9.3)
            _compare_keyless(diff, table, shards, cols, types, max_keys)
        return diff
    positions = [cols.index(k) for k in key]
    upstream: dict[Key, Key] = {}
    for shard in shards:
        for values in rows(shard, key, cols, Chunk(None, None)).values():
            stored = tuple(_stored(v, t) for v, t in zip(values, types, strict=True))
            k = tuple(stored[i] for i in positions)
            if k in upstream:
                _add(diff, diff.duplicated, k, max_keys)
            upstream[k] = stored
    downstream: dict[Key, Key] = {}
    for row in table.scan().to_arrow().to_pylist():
        values = tuple(row[c] for c in cols)
        downstream[tuple(values[i] for i in positions)] = values
    diff.chunks = 1
    diff.source_rows, diff.target_rows = len(upstream), len(downstream)
    for k in sorted(upstream.keys() - downstream.keys(), key=repr):
        _add(diff, diff.missing, k, max_keys)
    for k in sorted(downstream.keys() - upstream.keys(), key=repr):
        _add(diff, diff.extra, k, max_keys)
    for k in sorted(upstream.keys() & downstream.keys(), key=repr):
        if not _same(upstream[k], downstream[k]):
            _add(diff, diff.different, k, max_keys)
    if diff.differences:
        diff.chunks_differing = 1
    return diff


def _compare_keyless(
    diff: TableDiff,
    table: Any,
    shards: Sequence[TableRef],
    cols: list[str],
    types: list[str],
    max_keys: int,
) -> None:
    """A table without a primary key: the rows compared as multisets (equal rows repeat),
    listed by their values where the counts differ; SET members compared as sets."""
    upstream = Counter(
        tuple(_stored(v, t) for v, t in zip(values, types, strict=True))
        for shard in shards
        for values in all_rows(shard, cols)
    )
    sets = {i for row in upstream for i, v in enumerate(row) if isinstance(v, frozenset)}
    downstream = Counter(
        tuple(
            (frozenset(v.split(",")) if v else frozenset()) if i in sets and v is not None else v
            for i, v in enumerate(row[c] for c in cols)
        )
        for row in table.scan().to_arrow().to_pylist()
    )
    diff.chunks = 1
    diff.source_rows, diff.target_rows = upstream.total(), downstream.total()
    for values in sorted((upstream - downstream).elements(), key=repr):
        _add(diff, diff.missing, values, max_keys)
    for values in sorted((downstream - upstream).elements(), key=repr):
        _add(diff, diff.extra, values, max_keys)
    if diff.differences:
        diff.chunks_differing = 1


def _stored(value: Any, iceberg_type: str) -> Any:
    """A value as pymysql reads it from the source, as the sink stores it in `iceberg_type`."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):  # TIME → long microseconds
        return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if isinstance(value, (set, frozenset)):  # SET → its members (the order is the column's)
        return frozenset(value)
    if isinstance(value, bytes) and iceberg_type != "binary":  # BIT → long or decimal(20,0)
        value = int.from_bytes(value, "big")
    if isinstance(value, str) and iceberg_type in ("date", "timestamp", "timestamptz"):
        return None  # a zero date, which pymysql leaves as text
    if iceberg_type == "float":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if iceberg_type.startswith("decimal") and isinstance(value, int):
        return Decimal(value)
    if iceberg_type == "timestamptz" and isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC)
    return value


def _same(source: Key, target: Key) -> bool:
    """Whether a source row (`_stored`) and an Iceberg row hold the same values: a SET's
    members compared as a set (the sink writes them in the column's order)."""
    return all(
        (frozenset(t.split(",")) if t else frozenset()) == s
        if isinstance(s, frozenset) and isinstance(t, str)
        else s == t
        for s, t in zip(source, target, strict=True)
    )


__all__ = ["compare_iceberg"]
