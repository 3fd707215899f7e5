"""The merger's whole state as a plain value, and its JSON form.

A batch planner stores the snapshot taken after each batch (keyed by batch id) and rebuilds the
merger from it with `Merger.from_snapshot`, so replaying a batch gives the same output. Events
in the stash are encoded with the protocol's JSON codec, so the form is open.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rowbus.consumers.checkpoint import Lane, TopicPartition, floor_from_json, floor_to_json
from rowbus.consumers.exceptions import SubscriberError
from rowbus.consumers.positions import Floor, PosKey, key_from_json
from rowbus.consumers.spill import DataEvent
from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.errors import ProtocolError


@dataclass(frozen=True)
class MergerSnapshot:
    """Stash + watermarks + last positions (+ floors and offsets), enough to rebuild a merger."""

    expected: tuple[Lane, ...] = ()
    watermarks: Mapping[Lane, int] = field(default_factory=dict)
    raised_at: Mapping[Lane, int] = field(default_factory=dict)
    last_positions: Mapping[Lane, PosKey] = field(default_factory=dict)
    floors: Mapping[str, Floor] = field(default_factory=dict)
    next_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    ts: int = 0
    stash: tuple[tuple[str, int, int, DataEvent], ...] = ()

    def to_json(self) -> str:
        """The snapshot as one JSON document."""
        return json.dumps(
            {
                "expected": [list(lane) for lane in self.expected],
                "watermarks": [
                    [*lane, wm, self.raised_at.get(lane, 0)]
                    for lane, wm in sorted(self.watermarks.items())
                ],
                "last_positions": [
                    [*lane, list(key)] for lane, key in sorted(self.last_positions.items())
                ],
                "floors": {s: floor_to_json(f) for s, f in sorted(self.floors.items())},
                "next_offsets": [[*tp, o] for tp, o in sorted(self.next_offsets.items())],
                "ts": self.ts,
                "stash": [
                    [t, p, o, encode(e, Encoding.JSON)[0].decode("utf-8")]
                    for t, p, o, e in self.stash
                ],
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str | bytes) -> MergerSnapshot:
        """Inverse of `to_json`; SubscriberError if `text` is not a snapshot."""
        try:
            data: dict[str, Any] = json.loads(text)
            marks = data["watermarks"]
            stash = []
            for t, p, o, value in data["stash"]:
                event = decode(value.encode("utf-8"), None)
                if not isinstance(event, DataEvent):
                    raise TypeError(f"a {type(event).__name__} cannot be stashed")
                stash.append((str(t), int(p), int(o), event))
            return MergerSnapshot(
                expected=tuple((str(t), int(p), str(s)) for t, p, s in data["expected"]),
                watermarks={(str(t), int(p), str(s)): int(w) for t, p, s, w, _ in marks},
                raised_at={(str(t), int(p), str(s)): int(o) for t, p, s, _, o in marks},
                last_positions={
                    (str(t), int(p), str(s)): key_from_json(k)
                    for t, p, s, k in data["last_positions"]
                },
                floors={str(s): floor_from_json(f) for s, f in data["floors"].items()},
                next_offsets={(str(t), int(p)): int(o) for t, p, o in data["next_offsets"]},
                ts=int(data["ts"]),
                stash=tuple(stash),
            )
        except (ValueError, KeyError, TypeError, ProtocolError) as exc:
            raise SubscriberError(f"not a merger snapshot: {exc}") from exc
