"""Kafka consumers a process keeps between range reads (`source.read_range`), one per
(settings, topic, partition), so the next range of a partition continues from what the last
one fetched.

Why: a consumer opened per range asks the broker for the partition from the range's start, and
a broker that ignores fetch size limits (noida-db) answers with the whole rest of the
partition, which librdkafka's threads receive and parse although the read stops at the range's
end. In the apply job's keying tasks those threads spent 5.7 µs a record (1.6-11 in one task)
over a backlog of 17 batches, a fifth of the Python workers' CPU (spark_apply/README.md,
"Seventh step"); a real Kafka bounds one fetch, but librdkafka
still fetches ahead up to ``queued.min.messages`` (100,000 by default) per consumer. A kept
consumer pays that once and reads its next range from records already fetched.

Contract: `take` gives a consumer whose next delivered message (after `Kept.pending`) is at or
after `Kept.position`, assigned to the partition; a read that delivered
``[start, end)`` whole hands it back with `give_back` (the position the next read starts at,
the messages it consumed past it and the last `RECENT` it delivered before it, which a read
starting among them takes again), anything else — an error, a read abandoned half-way —
closes it (`discard`), since its position is then unknown. At most `LIMIT` are kept per
process (the oldest closed first). The records of a range are the same whichever consumer
reads them (offsets, read_committed), so keeping one changes what is read only in cost.

Idle, a kept consumer must not fetch: noida-db answers a fetch at a partition's end at once
instead of waiting, so idle consumers left assigned fetched in a loop. Stopping every one costs
most of the saving (in process, 4 consecutive 17k-record ranges: 0.24-0.26 CPU-s with a new
consumer each, 0.15-0.21 paused between them, 0.09-0.17 kept fetching), as librdkafka drops
what it fetched of a stopped partition and fetches from the position again. So range reads
fetch only while fewer than `QUEUED_MIN` messages are queued, and `give_back` stops a consumer
at once when its read ended within that of the high watermark it last saw, or, when only what
it delivered (`Kept.resume_at`, a consume having taken librdkafka's queue into `pending`)
stands within twice that, once it has been idle for `IDLE_S` (until 2026-11-27 never: such
consumers fetched in a loop while idle). It stops it by unassigning
it, not by librdkafka's pause: a resumed partition was fetched again only after 0.5-0.9 s
(its fetch backoff), which every read of a caught-up partition paid — the streaming job's
batches at a low lag (2026-11-27: 100 new records read in 490-900 ms after a pause, ~11 ms
after an assign at the next offset). The price is
memory: a kept consumer holds what it fetched until its next read or its eviction (on noida-db
up to the rest of its partition; on a real Kafka at most ``queued.max.messages.kbytes``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

QUEUED_MIN = 5_000
"""librdkafka's ``queued.min.messages`` for range reads: it fetches while fewer messages
than this are queued. An idle consumer with more queued fetches nothing; one with fewer (at
the end of what the broker had) is paused, since noida-db answers a fetch at the end of a
partition at once instead of waiting, which kept idle consumers fetching in a loop (a first
version without this: broker 54 -> 139 µs, Python workers 32 -> 51 µs a row)."""
LIMIT = 8
"""Consumers kept per process: a Python worker reads a few partitions per batch."""
IDLE_S = 1.0
"""A kept consumer that delivered (nearly) all the broker had, but whose read ended further
from the end (a consume took librdkafka's queue into `Kept.pending`), is unassigned once it has
not been taken again for this long: librdkafka fetches again below ``queued.min.messages``
and noida-db answers a fetch at the end at once, so left assigned while idle it fetches in a
loop (2026-11-27: 58,653 TCP segments a second from one Python worker, the broker at 14% of a
core, while a throttled sink held the job); unassigned at once, a busy job's next read pays a
new fetch for it (the demo: 9,223 -> ~8,450 row changes/s). A streaming job takes it again
within a trigger."""
RECENT = 10_000
"""Messages a kept consumer keeps of the end of its last read (`Kept.recent`). Throughput mode
reads a partition's held rows again at the next batch (`PlannerState.reread`: the rows above
the watermark, the last transactions of each partition, 900-2,400 offsets a 200k batch of
W1), so that batch's range starts behind where the consumer stands; without these it took a
new consumer, whose fetch from the broker starts again from there (on noida-db the whole rest
of the partition). ~10,000 messages of a few hundred bytes each: a few MB per kept consumer."""
SKIP = 60_000
"""Offsets a kept consumer may read and drop to reach a later start; further ahead (or
behind) a new consumer is assigned at the start instead. Spark runs a batch's tasks in
whichever Python workers are idle, so a worker's consumer of a partition is often a batch
behind (another worker read the last range): reading on over one batch's share of a partition
(17k offsets at 50k a batch over 3 partitions) costs the consume of what is dropped, far less
than a new consumer's fetch of the rest of the partition; with 20,000 the keying tasks met a
kept consumer in 1 read of 8."""


@dataclass(slots=True)
class Kept:
    """A consumer of one partition and where a read from it stands."""

    consumer: Any
    topic: str
    partition: int
    position: int
    """The first offset the next read may deliver: messages below it were delivered or
    dropped."""
    pending: list[Any] = field(default_factory=list)
    """Messages consumed past the last read's end (offset order), the next read's first."""
    recent: list[Any] = field(default_factory=list)
    """The last `RECENT` messages the last read delivered below its end (offset order): a
    next read that starts among them takes them again from here (`take`)."""
    paused: bool = False
    """Unassigned while idle (`give_back`), assigned again at `resume_at` by `take`."""
    idle_since: float | None = None
    """When it was given back near the partition's end still assigned: the reaper unassigns
    it after `IDLE_S` unless taken again."""

    def resume_at(self) -> int:
        """The offset after the last message this consumer delivered: `pending`'s last, or
        the last read's end (every message it delivered past that end is in `pending`)."""
        return int(self.pending[-1].offset()) + 1 if self.pending else self.position


class KeptConsumers:
    """The consumers of one process (`take`, `give_back`, `discard`); thread-safe."""

    def __init__(self, make: Callable[[dict[str, Any]], Any], limit: int = LIMIT) -> None:
        self._make = make
        self._limit = limit
        self._kept: dict[tuple[str, str, int], Kept] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._reaper: threading.Thread | None = None
        self._closed = False

    def take(self, kafka: dict[str, Any], topic: str, partition: int, start: int) -> Kept:
        """A consumer for reading `topic[partition]` from `start`: the kept one when `start`
        is at most `SKIP` offsets past where it stands, else a new one assigned at `start`."""
        from confluent_kafka import TopicPartition

        key = (_settings_key(kafka), topic, partition)
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is not None and kept.recent and kept.recent[0].offset() <= start < kept.position:
            # Behind, among what the last read delivered: those again, then on as before.
            kept.pending = from_offset(kept.recent, start) + kept.pending
            kept.position, kept.recent = start, []
        if kept is not None and kept.position <= start <= kept.position + SKIP:
            kept.idle_since = None
            if kept.paused:
                kept.consumer.assign([TopicPartition(topic, partition, kept.resume_at())])
                kept.paused = False
            return kept
        if kept is not None:
            kept.consumer.close()
        consumer = self._make(kafka)
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
        except BaseException:
            consumer.close()
            raise
        return Kept(consumer, topic, partition, start)

    def give_back(self, kafka: dict[str, Any], kept: Kept) -> None:
        """Keeps `kept` (its read ended whole at `kept.position`); paused when it has delivered
        (nearly) everything the broker had, so it does not fetch while idle."""
        from confluent_kafka import TopicPartition

        tp = TopicPartition(kept.topic, kept.partition)
        try:
            _low, high = kept.consumer.get_watermark_offsets(tp, cached=True)
            if high < 0 or high - kept.position < QUEUED_MIN:
                kept.consumer.unassign()
                kept.paused = True
            elif high - kept.resume_at() < 2 * QUEUED_MIN:
                # What it delivered, not where the read ended, and in offsets twice
                # QUEUED_MIN: librdkafka counts messages against queued.min.messages, and up
                # to half of a partition's offsets are commit markers. Stopped if idle (`IDLE_S`).
                kept.idle_since = time.monotonic()
        except BaseException:
            kept.consumer.close()
            raise
        evicted = []
        with self._lock:
            old = self._kept.pop((_settings_key(kafka), kept.topic, kept.partition), None)
            if old is not None:
                evicted.append(old)
            self._kept[(_settings_key(kafka), kept.topic, kept.partition)] = kept
            while len(self._kept) > self._limit:
                evicted.append(self._kept.pop(next(iter(self._kept))))
            if kept.idle_since is not None and not self._closed:
                if self._reaper is None:
                    self._reaper = threading.Thread(
                        target=self._reap, name="rowbus-kept-consumers", daemon=True
                    )
                    self._reaper.start()
                self._idle.notify()  # its wait may be longer than this one's
        for k in evicted:
            k.consumer.close()

    @staticmethod
    def discard(kept: Kept) -> None:
        """Closes a consumer whose read did not end whole."""
        kept.consumer.close()

    def close(self) -> None:
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
            self._closed = True
            self._idle.notify_all()
            reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.join(5)
        for k in kept:
            k.consumer.close()

    def _reap(self) -> None:
        """Unassigns kept consumers idle for `IDLE_S` near their partition's end."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                due = [
                    k
                    for k in self._kept.values()
                    if k.idle_since is not None and now - k.idle_since >= IDLE_S
                ]
                for k in due:
                    # Under the lock: `take` cannot hand it out meanwhile.
                    k.consumer.unassign()
                    k.paused, k.idle_since = True, None
                since = [k.idle_since for k in self._kept.values() if k.idle_since is not None]
                # Until the next one is due; with none, until `give_back` notifies.
                self._idle.wait(max(0.05, min(since) + IDLE_S - now) if since else None)

    def __len__(self) -> int:
        return len(self._kept)


def _settings_key(kafka: dict[str, Any]) -> str:
    return repr(sorted((str(k), str(v)) for k, v in kafka.items()))


def from_offset(msgs: list[Any], start: int) -> list[Any]:
    """`msgs` without the messages below `start` (one partition's, in offset order: those a
    kept consumer reads on its way to a later start). An error message is never dropped."""
    i = 0
    while i < len(msgs) and msgs[i].error() is None and msgs[i].offset() < start:
        i += 1
    return msgs[i:] if i else msgs


def past(msgs: list[Any], end: int) -> list[Any] | None:
    """The messages of `msgs` at or after `end` (the tail a read consumed past its range),
    or None when an error message is among them: the consumer is not kept then."""
    i = len(msgs)
    while i > 0 and (msgs[i - 1].error() is not None or msgs[i - 1].offset() >= end):
        if msgs[i - 1].error() is not None:
            return None
        i -= 1
    return msgs[i:]
