"""What the merger releases: whole upstream transactions (or one DDL), in commit order."""

from __future__ import annotations

import heapq
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.spill import Chunk, DataEvent, Spill
from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd


@dataclass(frozen=True, slots=True, order=True)
class KafkaPosition:
    """A record's place in Kafka."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(slots=True)
class Run:
    """The events of one transaction read from one partition, in partition (= binlog) order:
    the spilled chunks first, then the part still in memory."""

    topic: str
    partition: int
    offsets: array[int] = field(default_factory=lambda: array("q"))
    events: list[DataEvent] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    count: int = 0
    head: int = -1
    """The Kafka offset of its first event (kept when the events are spilled)."""

    def items(self, spill: Spill | None) -> Iterator[tuple[int, DataEvent]]:
        """(offset, event) pairs in order, reading spilled chunks back from `spill`."""
        spilled: Iterator[tuple[int, DataEvent]] = iter(())
        if self.chunks:
            assert spill is not None
            spilled = chain.from_iterable(spill.read(c) for c in self.chunks)
        return chain(spilled, zip(self.offsets, self.events, strict=True))


def _index(item: tuple[int, DataEvent]) -> int:
    txn = item[1].txn
    return txn.index if txn is not None else 0


def _located(run: Run, spill: Spill | None) -> Iterator[tuple[str, int, int, DataEvent]]:
    for offset, event in run.items(spill):
        yield run.topic, run.partition, offset, event


def _located_index(item: tuple[str, int, int, DataEvent]) -> int:
    txn = item[3].txn
    return txn.index if txn is not None else 0


class TransactionEvents:
    """The events of a transaction in transaction order; iterable more than once.

    Events spilled to disk are read back lazily while iterating, so a huge transaction is never
    held in memory whole. The spilled chunks are freed when this object is garbage collected.
    """

    __slots__ = ("__weakref__", "_count", "_runs", "_spill")

    def __init__(self, runs: Sequence[Run], spill: Spill | None) -> None:
        self._runs = tuple(runs)
        self._spill = spill
        self._count = sum(r.count for r in runs)
        chunks = [c for r in runs for c in r.chunks]
        if chunks and spill is not None:
            weakref.finalize(self, spill.release, chunks)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[DataEvent]:
        return (event for _, event in self.with_offsets())

    def with_offsets(self) -> Iterator[tuple[int, DataEvent]]:
        """(Kafka offset, event) pairs in transaction order."""
        if len(self._runs) == 1:
            return self._runs[0].items(self._spill)
        return heapq.merge(*(r.items(self._spill) for r in self._runs), key=_index)

    def located(self) -> Iterator[tuple[str, int, int, DataEvent]]:
        """(topic, partition, Kafka offset, event) in transaction order."""
        parts = [_located(r, self._spill) for r in self._runs]
        if len(parts) == 1:
            return parts[0]
        return heapq.merge(*parts, key=_located_index)

    @property
    def spilled(self) -> bool:
        """Whether some events are read back from disk."""
        return any(r.chunks for r in self._runs)

    def runs(self) -> tuple[Run, ...]:
        """The per-partition runs (for the merger's state)."""
        return self._runs


@dataclass(frozen=True, eq=False)
class Transaction:
    """One upstream transaction (or one DDL) of `source`, whole, at commit timestamp `ts`.

    `first`/`last` are the Kafka positions of its first and last event; `checkpoint` is the
    resume point just after it: store it once the transaction is applied. It is built on
    first access (`resume`), so transactions nobody checkpoints cost nothing.
    """

    source: str
    id: str
    ts: int
    events: TransactionEvents
    first: KafkaPosition
    last: KafkaPosition
    is_ddl: bool
    """Whether this "transaction" is one barrier event — a DDL statement or (1.5) a snapshot
    marker: known without reading the event back (a stashed one may be on disk)."""
    resume: Callable[[], Checkpoint] = field(repr=False)

    @property
    def checkpoint(self) -> Checkpoint:
        """The resume point just after this transaction."""
        return self.resume()

    @property
    def ddl(self) -> DdlChange | None:
        """The DDL, when this "transaction" is one DDL statement."""
        if not self.is_ddl:
            return None
        event = next(iter(self.events))
        return event if isinstance(event, DdlChange) else None

    @property
    def marker(self) -> SnapshotBegin | SnapshotEnd | None:
        """The snapshot marker (PROTOCOL.md §9.7), when this "transaction" is one."""
        if not self.is_ddl:
            return None
        event = next(iter(self.events))
        return event if isinstance(event, SnapshotBegin | SnapshotEnd) else None

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        return (
            f"Transaction(source={self.source!r}, id={self.id!r}, ts={self.ts}, "
            f"events={len(self.events)}, first={self.first}, last={self.last})"
        )
