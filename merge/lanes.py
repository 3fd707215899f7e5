"""The merger's lanes: which (topic, partition, source) lanes gate the merge and how far each is.

Pure, time only through the injected clock. One `Lanes` per `rowbus.merge.merger.Merger`; it
holds what the merger knows of where the input stands, none of the stashed events:

- the expected lanes, and the partitions known per topic (a source seen where it was not
  expected is learnt on every known partition of that topic, with a warning);
- the watermark of each lane, the offset that raised it, and when it last moved (to explain a
  stall); a watermark a resumed checkpoint carries waits (*deferred*) until its partition is
  re-read past where it was seen;
- the last order key seen on each lane (the duplicate rule) and, per source, the `Floor` of
  what is already behind;
- the next offset of each partition read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rowbus.merge.checkpoint import Lane, TopicPartition
from rowbus.merge.positions import Floor, PosKey

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Blocker:
    """Why the merge waits: a lane whose watermark is behind, or an incomplete transaction."""

    topic: str
    partition: int
    source: str
    watermark: int
    waiting_for: int | None
    silent_s: float
    reason: str

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] source {self.source}: {self.reason}"


class Lanes:
    """The lanes' watermarks, last positions, floors and offsets; see the module docstring.

    `last`, `floors` and `next_offsets` are read and written by the merger on every event (the
    hot path), so they are plain attributes.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        floors: Mapping[str, Floor] | None,
        start_offsets: Mapping[TopicPartition, int] | None,
        watermarks: Mapping[Lane, tuple[int, int]] | None,
    ) -> None:
        self._clock = clock
        self._born = clock()
        self.expected: set[Lane] = set()
        self._topics: dict[str, set[int]] = {}
        self.watermarks: dict[Lane, int] = {}
        self.raised_at: dict[Lane, int] = {}
        self.deferred: dict[TopicPartition, list[tuple[Lane, int, int]]] = {}
        """Per partition, checkpoint watermarks (lane, ts, offset seen at) waiting for it to be
        re-read that far."""
        self._advanced_at: dict[Lane, float] = {}
        self.last: dict[Lane, PosKey] = {}
        """The last order key taken per lane: an event not past it is a duplicate."""
        self.floors: dict[str, Floor] = dict(floors or {})
        self.next_offsets: dict[TopicPartition, int] = dict(start_offsets or {})
        for tp in self.next_offsets:
            self._topics.setdefault(tp[0], set()).add(tp[1])
        for lane, (ts, offset) in (watermarks or {}).items():
            tp = (lane[0], lane[1])
            if self.next_offsets.get(tp, 0) > offset:
                self.raise_mark(lane, ts, offset)
            else:
                self.deferred.setdefault(tp, []).append((lane, ts, offset))

    def expect(self, lanes: Iterable[Lane]) -> None:
        """Add lanes whose watermarks gate the merge."""
        for lane in lanes:
            self.expected.add(lane)
            self._topics.setdefault(lane[0], set()).add(lane[1])

    def learn(self, lane: Lane) -> None:
        """A source seen on a lane nobody expected: it gates every known partition of the
        topic from now on."""
        topic, partition, source = lane
        partitions = self._topics.setdefault(topic, set())
        partitions.add(partition)
        log.warning(
            "source %s was not expected on topic %s; it now gates the merge on partitions %s",
            source,
            topic,
            sorted(partitions),
        )
        self.expect((topic, p, source) for p in sorted(partitions))

    def raise_mark(self, lane: Lane, ts: int, offset: int) -> None:
        """A watermark `ts` read at `offset` of `lane`'s partition (never moves back)."""
        if ts > self.watermarks.get(lane, 0):
            self.watermarks[lane] = ts
            self.raised_at[lane] = offset
            self._advanced_at[lane] = self._clock()

    def apply_deferred(self, tp: TopicPartition, offset: int) -> None:
        """`tp` was read at `offset`: the checkpoint watermarks seen there or before hold now."""
        # A checkpoint's watermark holds once its partition is re-read past where it was seen:
        # only then is every event it covers back in the stash.
        waiting = self.deferred.get(tp)
        if not waiting:
            return
        still = []
        for lane, ts, seen_at in waiting:
            if offset >= seen_at:
                self.raise_mark(lane, ts, seen_at)
            else:
                still.append((lane, ts, seen_at))
        if still:
            self.deferred[tp] = still
        else:
            del self.deferred[tp]

    @property
    def watermark(self) -> int:
        """The minimum watermark over the expected lanes (0 while one has none)."""
        if not self.expected:
            return 0
        return min(self.watermarks.get(lane, 0) for lane in self.expected)

    def lane_watermarks(self) -> dict[Lane, int]:
        """The watermark of every expected lane (0 until one arrives)."""
        return {lane: self.watermarks.get(lane, 0) for lane in self.expected}

    def claims(self) -> dict[Lane, tuple[int, int]]:
        """(ts, offset that raised it) per lane, for a checkpoint."""
        # A watermark a resumed checkpoint carries still holds while it waits for its
        # partition to be re-read, so it stays in the checkpoint (which then never moves back).
        claims = {lane: (wm, self.raised_at[lane]) for lane, wm in self.watermarks.items()}
        for waiting in self.deferred.values():
            for lane, ts, seen_at in waiting:
                if ts > claims.get(lane, (0, 0))[0]:
                    claims[lane] = (ts, seen_at)
        return claims

    def behind(self, oldest: int | None, *, timed: bool) -> list[Blocker]:
        """The lanes whose watermark is below `oldest` (the oldest stashed ts) or, with
        nothing stashed, the lowest lanes; `timed`: say how long each has been silent."""
        now = self._clock()
        mark = self.watermark
        out: list[Blocker] = []
        for lane in sorted(self.expected):
            wm = self.watermarks.get(lane, 0)
            if (wm < oldest) if oldest is not None else (wm == mark):
                silent = now - self._advanced_at.get(lane, self._born)
                quiet = f", silent for {silent:.1f}s" if timed else ""
                reason = (
                    f"no watermark yet{quiet}"
                    if wm == 0
                    else f"watermark {wm} is behind ts {oldest}{quiet}"
                    if oldest is not None
                    else f"lowest watermark {wm}{quiet}"
                )
                out.append(Blocker(*lane, wm, oldest, silent, reason))
        return out
