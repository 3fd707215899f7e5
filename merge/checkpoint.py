"""The subscriber's resume point: Kafka offsets plus, per source, the floor already delivered.

Resuming from a `Checkpoint` re-reads each partition from `offsets` (the first offset not yet
wholly delivered) and drops every event at or below its source's `floors` entry, so what was
delivered before is not delivered again and nothing after it is lost. A checkpoint never moves
backwards: `check_follows` refuses one whose offsets or floors are behind its predecessor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from rowbus.merge.exceptions import CheckpointError
from rowbus.merge.positions import Floor, key_from_json

TopicPartition: TypeAlias = tuple[str, int]
Lane: TypeAlias = tuple[str, int, str]
"""(topic, partition, source): the unit a watermark is kept for."""


@dataclass(frozen=True)
class Checkpoint:
    """Where to resume: `offsets` per (topic, partition), `floors` per source, the lanes'
    `watermarks` as (ts, offset of the record that raised it) — a resumed merge uses one once it
    has re-read its partition past that offset, instead of waiting for the next watermark —,
    and `ts`, the commit timestamp of the last transaction delivered (0 before the first)."""

    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    floors: Mapping[str, Floor] = field(default_factory=dict)
    watermarks: Mapping[Lane, tuple[int, int]] = field(default_factory=dict)
    ts: int = 0

    def to_json(self) -> str:
        """Compact JSON: ``{"offsets": [[topic, partition, offset]…], "floors": {…}, …}``."""
        return json.dumps(
            {
                "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
                "floors": {s: floor_to_json(f) for s, f in sorted(self.floors.items())},
                "watermarks": [[*lane, *wm] for lane, wm in sorted(self.watermarks.items())],
                "ts": self.ts,
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str | bytes) -> Checkpoint:
        """Inverse of `to_json`; CheckpointError if `text` is not a checkpoint."""
        try:
            data = json.loads(text)
            return Checkpoint(
                offsets={(str(t), int(p)): int(o) for t, p, o in data["offsets"]},
                floors={str(s): floor_from_json(f) for s, f in data["floors"].items()},
                watermarks={
                    (str(t), int(p), str(s)): (int(w), int(o))
                    for t, p, s, w, o in data["watermarks"]
                },
                ts=int(data["ts"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"not a subscriber checkpoint: {exc}") from exc

    def check_follows(self, previous: Checkpoint | None) -> None:
        """CheckpointError if this checkpoint is behind `previous` anywhere."""
        if previous is None:
            return
        for tp, offset in previous.offsets.items():
            now = self.offsets.get(tp)
            if now is None or now < offset:
                raise CheckpointError(
                    f"checkpoint would move {tp[0]}[{tp[1]}] back from offset {offset} to {now}"
                )
        for source, floor in previous.floors.items():
            now_floor = self.floors.get(source)
            before, after = floor.position, now_floor.position if now_floor else None
            if before is not None and (after is None or after < before):
                raise CheckpointError(
                    f"checkpoint would move source {source} back from {before} to {after}"
                )
        for lane, (wm, _) in previous.watermarks.items():
            if self.watermarks.get(lane, (0, 0))[0] < wm:
                raise CheckpointError(f"checkpoint would move the watermark of {lane} back")
        if self.ts < previous.ts:
            raise CheckpointError(f"checkpoint would move ts back from {previous.ts} to {self.ts}")


def floor_to_json(floor: Floor) -> dict[str, Any]:
    return {
        "position": list(floor.position) if floor.position is not None else None,
        "ts": floor.ts,
        "gtid": list(floor.gtid) if floor.gtid is not None else None,
    }


def floor_from_json(data: Mapping[str, Any]) -> Floor:
    pos = data.get("position")
    gtid = data.get("gtid")
    return Floor(
        position=key_from_json(pos) if pos else None,
        ts=int(data["ts"]) if data.get("ts") is not None else None,
        gtid=(str(gtid[0]), int(gtid[1])) if gtid else None,
    )
