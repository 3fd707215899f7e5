"""Cutting a stashed transaction in two around held tables (the shard-DDL hold's split).

Pure but for the spill store it streams spilled runs through. `Side` gathers one side of the
cut while the transaction's events stream past once; `Split` is the record of a cut that the
merger keeps (`Merger.splits`) and the Spark planner reports. The rule of what is cut is
`rowbus.merge.hold`; the cut itself is `rowbus.merge.stash.Stash.cut`.
"""

from __future__ import annotations

from collections.abc import Iterator, Set
from dataclasses import dataclass, field

from rowbus.merge.checkpoint import TopicPartition
from rowbus.merge.positions import PosKey, event_key
from rowbus.merge.spill import DataEvent
from rowbus.merge.state import Table
from rowbus.merge.transaction import KafkaPosition, Run


def table_of(event: DataEvent) -> Table:
    """The (source, schema, table) `event` touches."""
    return (event.source, event.schema, event.table)


@dataclass(frozen=True, slots=True)
class Split:
    """A transaction `release` cut in two: its events on `held` wait (from `at`, its first
    held event, at binlog position `position`); the rest was released."""

    source: str
    id: str
    ts: int
    held: tuple[Table, ...]
    at: KafkaPosition
    position: str


@dataclass(slots=True)
class Side:
    """One side of a split transaction, gathered while its events stream past."""

    runs: dict[TopicPartition, Run] = field(default_factory=dict)
    tables: set[Table] = field(default_factory=set)
    size: int = 0
    head: int = -1
    min_key: PosKey | None = None
    max_key: PosKey | None = None
    first: KafkaPosition | None = None
    last: KafkaPosition | None = None
    position: object = None
    """The binlog position of its first event (for the log)."""

    def watch(
        self,
        tp: TopicPartition,
        items: Iterator[tuple[int, DataEvent]],
        stay: Set[Table],
        keep: bool,
    ) -> Iterator[tuple[int, DataEvent]]:
        """The items of `items` on this side (on `stay` when `keep`), noted as they pass."""
        for offset, event in items:
            table = table_of(event)
            if (table in stay) is not keep:
                continue
            key = event_key(event)
            here = KafkaPosition(tp[0], tp[1], offset)
            if self.head < 0:
                self.head = offset
            if self.min_key is None or key < self.min_key:
                self.min_key, self.first, self.position = key, here, event.position
            if self.max_key is None or key > self.max_key:
                self.max_key, self.last = key, here
            self.tables.add(table)
            self.size += 1
            yield offset, event

    def bounds(self) -> tuple[PosKey, PosKey, KafkaPosition, KafkaPosition]:
        """(min key, max key, first, last) of the events seen; the side must have one."""
        assert self.min_key is not None
        assert self.max_key is not None
        assert self.first is not None
        assert self.last is not None
        return self.min_key, self.max_key, self.first, self.last
