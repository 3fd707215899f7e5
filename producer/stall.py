"""Notice when what the reader committed cannot be read by a read_committed consumer.

A broker that leaves a transaction open or unresolved (seen on noida-db after a burst of
fencing, ENVIRONMENT.md) keeps a partition's last stable offset (LSO) behind it: every later
record stays invisible to read_committed consumers while the reader commits on. Every
`interval_s` the watch compares the LSO of each partition with the offsets the reader had
committed at the previous probe — long enough ago that every commit marker is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rowbus.clients.kafka import Stall, TopicPartition

log = logging.getLogger(__name__)

Probe = Callable[[Mapping[TopicPartition, int]], list[Stall]]


class StableWatch:
    def __init__(self, probe: Probe, interval_s: float) -> None:
        self._probe = probe
        self._interval = interval_s
        self._pending: dict[TopicPartition, int] = {}
        self._next = 0.0
        self._reported: set[tuple[TopicPartition, int]] = set()
        self.stalled: list[Stall] = []
        """The stalls found by the last probe (empty when every partition is readable)."""

    def committed(self, offsets: Mapping[TopicPartition, int], now: float) -> None:
        """After a commit: probe if due, then remember `offsets` for the next probe."""
        if now < self._next:
            return
        self._next = now + self._interval
        if self._pending:
            try:
                self.stalled = self._probe(self._pending)
            except Exception as exc:  # noqa: BLE001 - a failed probe must not stop publishing
                log.debug("cannot probe the last stable offsets: %s", exc)
            for stall in self.stalled:
                key = ((stall.topic, stall.partition), stall.stable)
                if key not in self._reported:
                    self._reported.add(key)
                    log.warning("published records are unreadable: %s", stall)
        self._pending = dict(offsets)
