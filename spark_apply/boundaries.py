"""Each partition's last read offsets, checked again before the job reads past them.

A broker that loses records it had acknowledged and then reuses their offsets (noida-db after a
restart, clean or kill -9: issue #33) changes the log *below* a position the job already read
to. The job's next range starts at that position, so the records now at the reused offsets —
often a reader's re-published transactions — are never read: a transaction the job holds part
of waits forever, and a single-partition one is lost without a trace. The end offset alone
cannot show it: the broker may be refilled past the job's position before the job asks again.

So when the source plans a range of a partition (`KafkaStreamReader.latestOffset`), it records
the records of the last `WINDOW` offsets below the range's end (offset, timestamp, CRC of key
and value), read_uncommitted: a `Boundary`. Before it plans the next range from that end, it
reads those offsets again; anything different (a record gone, replaced or added) raises
`LogChangedError` naming ``topic[partition]@offset``. Read_uncommitted, because a transaction's
outcome may flip without any record moving (noida-db, after a kill -9, reported a committed
transaction the job had read as aborted: read_committed consumers no longer got its records,
which were still there; nothing new sits at those offsets, so nothing is skipped). The check
reads `WINDOW` offsets per partition and planned range, on the driver, with a consumer of the
source's own (on noida-db, which ignores fetch size limits, a fetch returns the partition's
tail from there: see `DEEP` and `SPAN`).

What it cannot see: a range ending `DEEP` offsets or more below its partition's end (a
backlog the read limit cuts) gets no boundary; a change entirely below a window that leaves
the window's records equal (a broker refills lost offsets with other records, so the window
differs unless nothing was written again there); and, without the ``boundaries`` option of the
source (a file; the job keeps it in its checkpoint folder when that is local), the first range
after a job restart.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rowbus.spark_apply.exceptions import LogChangedError

BOUNDARIES_FILE = "rowbus-boundaries.json"
"""The file the job keeps its boundaries in, in its (local) Spark checkpoint folder."""

WINDOW = 16
"""Offsets below a range's end whose records are read again (commit markers occupy some)."""

DEEP = 100_000
"""A range that ends this many offsets or more below its partition's end gets no boundary: a
broker that loses records loses its newest ones (noida-db: the writes of about its last second,
fewer than ~75k records at its measured produce rate), far above such an end. On noida-db, which
answers a fetch with the partition's whole tail, reading a window costs the tail's transfer
(measured: ~50 ms of driver and 70-130 ms of broker CPU per trigger over a 200k-record backlog
with both windows read; a few ms when the job is caught up), so a job working through a backlog
does not pay it per batch."""

SPAN = 10_000
"""A new range at most this long is read in the same pass as the boundary it starts at, its
records through Python (about a microsecond each), instead of a second fetch of the tail."""

_READ_TIMEOUT_S = 30.0
_POLL_S = 0.01

Record = tuple[int, int, int]
"""(offset, timestamp, CRC-32 of key and value) of one record."""

Partition = tuple[str, int]


@dataclass(frozen=True)
class Boundary:
    """The records of ``[since, end)`` of one partition, as read when the source
    planned a range ending at `end`."""

    since: int
    end: int
    records: tuple[Record, ...]


def record_of(msg: Any) -> Record:
    """A message's identity: its offset, timestamp and the CRC of its key and value."""
    key: bytes | None = msg.key()
    value: bytes | None = msg.value()
    crc = zlib.crc32(value or b"", zlib.crc32(key or b""))
    return (msg.offset(), msg.timestamp()[1], crc)


def read_windows(
    consumer: Any, windows: Mapping[Partition, tuple[int, int]], timeout_s: float = _READ_TIMEOUT_S
) -> dict[Partition, tuple[Record, ...]]:
    """The records each partition holds in its ``[since, end)`` now, read with `consumer`
    (read_uncommitted: the records the log holds, whatever their transactions' outcome), which
    is assigned these partitions for the read and unassigned after it."""
    from confluent_kafka import TopicPartition

    found: dict[Partition, list[Record]] = {tp: [] for tp in windows}
    if not windows:
        return {}
    consumer.assign([TopicPartition(t, p, since) for (t, p), (since, _) in windows.items()])
    try:
        pending = {tp for tp, (since, end) in windows.items() if end > since}
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                t, p = min(pending)
                raise TimeoutError(
                    f"{t}[{p}]: reading [{windows[(t, p)][0]}, {windows[(t, p)][1]}) again "
                    f"to check it took over {timeout_s:.0f}s"
                )
            for msg in consumer.consume(1000, _POLL_S):
                if msg.error() is not None:
                    raise RuntimeError(f"{msg.topic()}[{msg.partition()}]: {msg.error()}")
                tp = (msg.topic(), msg.partition())
                if tp in pending and msg.offset() < windows[tp][1]:
                    found[tp].append(record_of(msg))
                elif tp in pending:
                    pending.discard(tp)
            # Markers and aborted records occupy offsets no message is delivered for.
            for now in consumer.position([TopicPartition(t, p) for t, p in pending]):
                if now.offset >= windows[(now.topic, now.partition)][1]:
                    pending.discard((now.topic, now.partition))
    finally:
        consumer.unassign()
    return {tp: tuple(records) for tp, records in found.items()}


def window_of(end: int, low: int) -> tuple[int, int]:
    """The offsets `Boundary` records below `end` (none below the partition's log start)."""
    return (max(end - WINDOW, low, 0), end)


class Boundaries:
    """The last `Boundary` of each partition: `advance` checks the boundaries the planned
    ranges start at and records the ones they end at, in `path` too when given (read at the
    first `advance`), so the first range a restarted job plans is checked as well."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._last: dict[Partition, Boundary] = {}
        self._loaded = path is None

    def _load(self) -> None:
        self._loaded = True
        if self.path is None or not self.path.exists():
            return
        saved = json.loads(self.path.read_text())
        for topic, parts in saved.items():
            for p, (since, end, records) in parts.items():
                rows = tuple((int(o), int(ts), int(crc)) for o, ts, crc in records)
                self._last[(topic, int(p))] = Boundary(int(since), int(end), rows)

    def _save(self) -> None:
        if self.path is None:
            return
        saved: dict[str, dict[str, list[Any]]] = {}
        for (topic, p), b in sorted(self._last.items()):
            saved.setdefault(topic, {})[str(p)] = [b.since, b.end, [list(r) for r in b.records]]
        # Written beside and renamed in: a crash leaves the old file or the new one, whole.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        part = self.path.with_name(self.path.name + ".part")
        part.write_text(json.dumps(saved))
        os.replace(part, self.path)

    def advance(
        self,
        consumer: Any,
        ranges: Mapping[Partition, tuple[int, int]],
        lows: Mapping[Partition, int],
        highs: Mapping[Partition, int],
    ) -> None:
        """`ranges`: each planned partition's ``(begin, end)``; `lows` and `highs`: its log
        start and last stable offset now. Raises `LogChangedError` for a boundary that
        changed; reads with `consumer` (`read_windows`)."""
        if not self._loaded:
            self._load()
        verify: dict[Partition, Boundary] = {}
        record: dict[Partition, tuple[int, int]] = {}
        for tp, (begin, end) in ranges.items():
            before = self._last.pop(tp, None)
            # A boundary of another start (a limit cut the batch elsewhere) or below the log's
            # start now (retention) says nothing about this range.
            if before and before.end == begin and before.since >= lows[tp]:
                verify[tp] = before
            if highs[tp] - end < DEEP:
                record[tp] = window_of(end, lows[tp])
        first: dict[Partition, tuple[int, int]] = {}
        second: dict[Partition, tuple[int, int]] = {}
        for tp, before in verify.items():
            if tp in record and record[tp][1] - before.since <= SPAN:
                first[tp] = (before.since, record[tp][1])
            else:
                first[tp] = (before.since, before.end)
        for tp, window in record.items():
            if tp not in first:
                first[tp] = window
            elif first[tp][1] < window[1]:
                second[tp] = window
        read = read_windows(consumer, first)
        for tp, records in read_windows(consumer, second).items():
            read[tp] = read[tp] + records
        for (topic, p), before in verify.items():
            now = tuple(r for r in read[(topic, p)] if r[0] < before.end)
            check(topic, p, before, now)
        for tp, (since, end) in record.items():
            records = tuple(r for r in read[tp] if since <= r[0] < end)
            self._last[tp] = Boundary(since, end, records)
        self._save()


def check(topic: str, partition: int, before: Boundary, now: tuple[Record, ...]) -> None:
    """Raises `LogChangedError` unless the partition still holds `before`'s records."""
    if now == before.records:
        return
    was = {r[0]: r for r in before.records}
    has = {r[0]: r for r in now}
    changed = sorted(o for o in was.keys() | has.keys() if was.get(o) != has.get(o))
    offset = changed[0]
    what = (
        "is gone"
        if offset not in has
        else "is another record now"
        if offset in was
        else "appeared after the job had read past it"
    )
    raise LogChangedError(topic, partition, offset, before.end, what)
