"""The apply job's stall report: one WARNING line, at most once a minute, while batches hold
events and release none, naming what the merge waits for (issue #33: a job held 35,001 events
for hundreds of batches and no line said why).

Pure: fed each batch's outcome, time only through the injected `clock`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

MIN_BATCHES = 5
"""Batches in a row that hold events and apply nothing before the first line (a lane a little
behind holds a batch or two in normal running)."""
INTERVAL_S = 60.0
"""At most one line per this many seconds."""


class StallReporter:
    """Counts the batches in a row that hold events and apply no row; once `min_batches` of
    them have passed, `observe` logs (and returns) one line per `interval_s` at most."""

    def __init__(
        self,
        *,
        min_batches: int = MIN_BATCHES,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._min_batches = min_batches
        self._interval_s = interval_s
        self._clock = clock
        self._batches = 0
        self._since = 0.0
        self._said_at: float | None = None

    def observe(
        self,
        batch_id: int,
        applied: int,
        stash: int,
        watermark: int,
        held: str | None,
        blockers: Sequence[str],
    ) -> str | None:
        """Take one batch's outcome; the line logged, if any."""
        now = self._clock()
        if applied or not stash:
            self._batches = 0
            self._said_at = None
            return None
        if self._batches == 0:
            self._since = now
        self._batches += 1
        if self._batches < self._min_batches:
            return None
        if self._said_at is not None and now - self._said_at < self._interval_s:
            return None
        self._said_at = now
        why = "; ".join(blockers) or "no lane behind and no incomplete transaction named"
        line = (
            f"batch {batch_id}: {self._batches} batches in a row ({now - self._since:.0f}s) "
            f"applied nothing while {stash} events are held (watermark {watermark}); oldest "
            f"held: {held or 'unknown'}; waiting for: {why}"
        )
        log.warning("%s", line)
        return line
