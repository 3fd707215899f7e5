"""The checkpoints of one `Merger.release()` batch, built only when asked for.

Between two transactions of a batch only a few things change: the floor of the released
transaction's source, the resume offsets of the partitions it was read from, and the ts. The
merger records those steps; `CheckpointTrail.at(i)` replays them onto the state captured at the
start of the batch. Asking for the checkpoints in order (what a subscriber does) costs one step
each, so a transaction nobody saves costs no dictionary copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rowbus.merge.checkpoint import Checkpoint, Lane, TopicPartition
from rowbus.merge.positions import Floor


@dataclass(frozen=True, slots=True)
class Step:
    """What releasing one transaction changed."""

    offsets: Mapping[TopicPartition, int]
    source: str
    floor: Floor
    ts: int


class CheckpointTrail:
    """The base state of a batch plus one `Step` per released transaction."""

    __slots__ = ("_base", "_cursor", "_watermarks", "steps")

    def __init__(
        self,
        offsets: Mapping[TopicPartition, int],
        floors: Mapping[str, Floor],
        watermarks: Mapping[Lane, tuple[int, int]],
        ts: int,
    ) -> None:
        self._base = (dict(offsets), dict(floors), ts)
        self._watermarks = dict(watermarks)
        self._cursor = (-1, dict(offsets), dict(floors), ts)
        self.steps: list[Step] = []

    def add(self, step: Step) -> int:
        """Record a step; returns its index."""
        self.steps.append(step)
        return len(self.steps) - 1

    def at(self, index: int) -> Checkpoint:
        """The checkpoint right after the transaction of step `index`."""
        done, offsets, floors, ts = self._cursor
        if index < done:  # asked out of order: replay from the base, keep the cursor
            offsets, floors, ts = dict(self._base[0]), dict(self._base[1]), self._base[2]
            done = -1
        for step in self.steps[done + 1 : index + 1]:
            offsets.update(step.offsets)
            floors[step.source] = step.floor
            ts = max(ts, step.ts)
        if index >= self._cursor[0]:
            self._cursor = (index, offsets, floors, ts)
        return Checkpoint(dict(offsets), dict(floors), self._watermarks, ts)
