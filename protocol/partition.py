"""Message keys and partitioning, compatible with Kafka's Java client (PROTOCOL.md §6).

Kafka's default partitioner puts a keyed record on ``toPositive(murmur2(key)) % numPartitions``
with ``toPositive(x) = x & 0x7fffffff``; `murmur2` and `java_partition` reproduce it bit for bit,
so a record keyed by rowbus lands where any Java, librdkafka (``murmur2_random``) or Python
client would put it.
"""

from __future__ import annotations

import fnmatch
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from rowbus.protocol.codec.jsonc import value_to_json
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    DdlChange,
    Event,
    Heartbeat,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
)
from rowbus.protocol.values import Value

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF
_key_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2, seed 0x9747b28c, as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    n4 = length // 4
    for word in struct.unpack_from(f"<{n4}I", data):
        k = (word * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        base = n4 * 4
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff``."""
    return n & 0x7FFFFFFF


def java_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with key `key`."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


def encode_key(schema: str, table: str | None, values: Sequence[Value] = ()) -> bytes:
    """The canonical key ``[schema, table, *values]`` as compact UTF-8 JSON (values as in §4).

    E.g. ``encode_key("shop", "orders", (42,))`` is ``b'["shop","orders",42]'``.
    """
    try:
        text = _key_dumps([schema, table, *(value_to_json(v) for v in values)])
        return text.encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode key of {schema}.{table}: {exc}") from None


class DispatchRule(Enum):
    """What decides a row's partition."""

    BY_PRIMARY_KEY = "primary_key"  # the key itself: every row has its own place (default)
    BY_TABLE = "table"  # [schema, table]: a whole table in one partition, in binlog order
    BY_COLUMNS = "columns"  # [schema, table, *chosen column values]: e.g. a shard field


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A dispatch rule and, for BY_COLUMNS, its columns."""

    rule: DispatchRule = DispatchRule.BY_PRIMARY_KEY
    columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.rule is DispatchRule.BY_COLUMNS) != bool(self.columns):
            raise ValueError("BY_COLUMNS needs columns, and only BY_COLUMNS takes them")


class Partitioner:
    """Gives each event its key and partition(s) in a topic of `num_partitions` partitions.

    `rules` maps ``schema.table`` patterns (fnmatch wildcards, first match in order wins) to a
    `Dispatch`; unmatched tables use `default`. A table without a primary key is dispatched
    BY_TABLE whatever its rule says when the rule is BY_PRIMARY_KEY.
    """

    def __init__(
        self,
        num_partitions: int,
        rules: Mapping[str, Dispatch] | None = None,
        default: Dispatch | None = None,
    ) -> None:
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, not {num_partitions}")
        self.num_partitions = num_partitions
        self._rules = tuple((rules or {}).items())
        self._default = default or Dispatch()
        self._cache: dict[tuple[str, str], Dispatch] = {}

    def dispatch_for(self, schema: str, table: str) -> Dispatch:
        """The dispatch of `schema.table`."""
        found = self._cache.get((schema, table))
        if found is None:
            name = f"{schema}.{table}"
            found = next((d for p, d in self._rules if fnmatch.fnmatchcase(name, p)), None)
            found = self._cache[schema, table] = found or self._default
        return found

    def row_key(self, row: RowChange, table: TableSchema) -> bytes:
        """The message key of `row`: ``[schema, table, *primary key values]``."""
        _check_table(row, table)
        img = row.image
        return encode_key(row.schema, row.table, [img[i] for i in table.pk_indexes])

    def dispatch_bytes(self, row: RowChange, table: TableSchema) -> bytes:
        """The bytes whose murmur2 picks `row`'s partition."""
        dispatch = self.dispatch_for(row.schema, row.table)
        if dispatch.rule is DispatchRule.BY_TABLE or (
            not table.primary_key and (dispatch.rule is DispatchRule.BY_PRIMARY_KEY)
        ):
            return encode_key(row.schema, row.table)
        if dispatch.rule is DispatchRule.BY_COLUMNS:
            _check_table(row, table)
            try:
                idx = [table.index_of(c) for c in dispatch.columns]
            except ValueError:
                raise ProtocolError(
                    f"dispatch columns {dispatch.columns} are not all in {table.qualified}"
                ) from None
            img = row.image
            return encode_key(row.schema, row.table, [img[i] for i in idx])
        return self.row_key(row, table)

    def partition_row(self, row: RowChange, table: TableSchema) -> tuple[bytes, int]:
        """`row`'s message key and partition."""
        key = self.row_key(row, table)
        dispatch = self.dispatch_bytes(row, table)
        return key, java_partition(dispatch, self.num_partitions)

    def key_changed(self, row: RowChange, table: TableSchema) -> bool:
        """Whether an UPDATE moves its row to another dispatch key; a reader publishes such an
        update as a DELETE of the old image then an INSERT of the new one (PROTOCOL.md §6)."""
        if row.before is None or row.after is None:
            return False
        before = RowChange(
            source=row.source,
            ts=row.ts,
            op=row.op.DELETE,
            schema=row.schema,
            table=row.table,
            schema_id=row.schema_id,
            primary_key=row.primary_key,
            before=row.before,
            after=None,
            txn=row.txn,
            position=row.position,
        )
        return self.row_key(before, table) != self.row_key(row, table) or self.dispatch_bytes(
            before, table
        ) != self.dispatch_bytes(row, table)

    def route(
        self, event: Event, table: TableSchema | None = None
    ) -> list[tuple[bytes | None, int]]:
        """Every (key, partition) `event` is written to.

        A row goes to one partition; a DDL or a snapshot marker (barriers), a Resolved and a
        Heartbeat go to every partition — the barriers keyed ``[schema, table]``, the
        watermarks without a key.
        """
        match event:
            case RowChange():
                if table is None:
                    raise ProtocolError(
                        f"routing a row of {event.schema}.{event.table} needs its schema"
                    )
                return [self.partition_row(event, table)]
            case DdlChange() | SnapshotBegin() | SnapshotEnd():
                key = encode_key(event.schema, event.table)
                return [(key, p) for p in range(self.num_partitions)]
            case Resolved() | Heartbeat():
                return [(None, p) for p in range(self.num_partitions)]
        raise ProtocolError(f"{type(event).__name__} is not a data-topic event")  # pragma: no cover


def _check_table(row: RowChange, table: TableSchema) -> None:
    if len(row.image) != len(table.columns) or row.schema_id != table.schema_id:
        raise ProtocolError(
            f"row of {row.schema}.{row.table} at {row.position} (schema id {row.schema_id}, "
            f"{len(row.image)} values) does not match table schema {table.schema_id} "
            f"({len(table.columns)} columns)"
        )
