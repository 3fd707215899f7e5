"""The pure part of sharded consumption: which shard a row is in, which process owns which
shard, what a process must stop and start when the members change, where it reads from.

No I/O: `rowbus.consumers.sharded.subscriber` feeds these from ZooKeeper and the Subscriber.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from rowbus.merge.checkpoint import Checkpoint, Lane, TopicPartition
from rowbus.merge.positions import Floor
from rowbus.protocol.events import (
    DdlChange,
    Op,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    order_key,
)
from rowbus.protocol.partition import encode_key, java_partition
from rowbus.protocol.values import Value


def assign(members: Iterable[str], shards: int) -> dict[str, frozenset[int]]:
    """Shard → member, round robin over the *sorted* members: every shard has exactly one
    owner, owners differ by at most one shard, and every process that sees the same member
    list computes the same answer."""
    ordered = sorted(set(members))
    out: dict[str, set[int]] = {m: set() for m in ordered}
    if ordered:
        for shard in range(shards):
            out[ordered[shard % len(ordered)]].add(shard)
    return {m: frozenset(s) for m, s in out.items()}


@dataclass(frozen=True)
class Rebalance:
    """What one process does on a membership change: `stop` (checkpoint, then release) the
    shards it loses, `start` (from their storage points) the ones it gains."""

    stop: frozenset[int]
    start: frozenset[int]
    keep: frozenset[int]


def rebalance(held: Iterable[int], members: Iterable[str], me: str, shards: int) -> Rebalance:
    """The moves for `me`, holding `held`, given the current `members` (`me` among them)."""
    target = assign(members, shards).get(me, frozenset())
    now = frozenset(held)
    return Rebalance(stop=now - target, start=target - now, keep=now & target)


class ShardKey:
    """A row's shard: the hash of its shard field, like the Kafka partitioner's.

    `columns` maps ``schema.table`` patterns (fnmatch, first match wins) to the columns whose
    values form the shard field; a table that matches none is sharded by its primary key, and
    a table without one by its name (all its rows in one shard, in order: PROTOCOL.md "Tables
    without a primary key"), as the reader dispatches it. The values come from the row's
    image (the after image, the before image of a delete). An update whose shard field
    changes is handed over as a DELETE of its before image to its old shard and an INSERT of
    its after image to its new one (`route`), so each shard sees every row it holds from its
    insert to its delete, in order. `java_partition(encode_key(...))` keeps the hash the same
    in every process, and with the default and ``shards`` equal to the partition count a
    shard is a partition.
    """

    def __init__(self, shards: int, columns: Mapping[str, Sequence[str]] | None = None) -> None:
        if shards < 1:
            raise ValueError("shards must be at least 1")
        self.shards = shards
        self._rules = [(pattern, tuple(cols)) for pattern, cols in (columns or {}).items()]
        self._indexes: dict[int, tuple[int, ...] | None] = {}

    def indexes(self, table: TableSchema) -> tuple[int, ...] | None:
        """Positions of the shard field in an image (None: the whole image)."""
        if table.schema_id in self._indexes:
            return self._indexes[table.schema_id]
        chosen: tuple[int, ...] | None = table.pk_indexes  # () for a keyless table: by name
        for pattern, cols in self._rules:
            if fnmatch.fnmatchcase(table.qualified, pattern):
                chosen = tuple(table.index_of(c) for c in cols)
                break
        self._indexes[table.schema_id] = chosen
        return chosen

    def of(self, row: RowChange, table: TableSchema) -> int:
        """The shard of `row`'s image (after, or before for a delete); see `route`."""
        return self._shard(row, table, row.image)

    def _shard(self, row: RowChange, table: TableSchema, image: Sequence[Value]) -> int:
        idx = self.indexes(table)
        values = tuple(image) if idx is None else tuple(image[i] for i in idx)
        return java_partition(encode_key(row.schema, row.table, values), self.shards)

    def route(self, row: RowChange, table: TableSchema) -> list[tuple[int, RowChange]]:
        """Where `row` goes: its shard, or — an update whose shard field changes — a DELETE
        of the before image to the old shard and an INSERT of the after image to the new."""
        new = self._shard(row, table, row.image)
        if row.op is not Op.UPDATE or row.before is None or row.after is None:
            return [(new, row)]
        old = self._shard(row, table, row.before)
        if old == new:
            return [(new, row)]
        return [
            (old, replace(row, op=Op.DELETE, after=None)),
            (new, replace(row, op=Op.INSERT, before=None)),
        ]


def combine(points: Sequence[Checkpoint]) -> Checkpoint | None:
    """One resume point covering every shard of `points` (the oldest of them, element by
    element): partitions from the lowest offset, sources from the lowest floor, lanes from the
    lowest watermark. What each shard already handled is then skipped by `already_handled`.
    None when `points` is empty."""
    if not points:
        return None
    if len(points) == 1:
        return points[0]
    offsets: dict[TopicPartition, int] = {}
    for tp in set.intersection(*(set(p.offsets) for p in points)):
        offsets[tp] = min(p.offsets[tp] for p in points)
    floors: dict[str, Floor] = {}
    for source in set.intersection(*(set(p.floors) for p in points)):
        positions = [p.floors[source].position for p in points]
        if all(pos is not None for pos in positions):
            floors[source] = Floor(position=min(pos for pos in positions if pos is not None))
    watermarks: dict[Lane, tuple[int, int]] = {}
    for lane in set.intersection(*(set(p.watermarks) for p in points)):
        watermarks[lane] = min(p.watermarks[lane] for p in points)
    return Checkpoint(offsets, floors, watermarks, min(p.ts for p in points))


def already_handled(
    point: Checkpoint | None, last: RowChange | DdlChange | SnapshotBegin | SnapshotEnd
) -> bool:
    """Whether the transaction whose last event (in binlog order) is `last` is at or below a
    shard's storage point: `Checkpoint` floors are raised a whole transaction at a time."""
    if point is None:
        return False
    floor = point.floors.get(last.source)
    return floor is not None and floor.covers(last, order_key(last))
