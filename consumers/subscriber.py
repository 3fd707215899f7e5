"""The Subscriber: Kafka data topics in, whole transactions out, in commit order.

Lifecycle: the constructor does no I/O. `start()` (or ``with``) opens the checkpoint store,
reads the checkpoints topic (expected sources, start positions) and the schemas topic, builds
the `Merger` and assigns every partition of the subscribed topics (read_committed).
`poll()` reads a batch, decodes it, feeds the merger and returns what it released;
`run(handler)` and iterating (`transactions()`) build on it. A snapshot row (`Op.READ`,
PROTOCOL.md §9.5) comes before every streamed change of its row; a handler applies it as an
upsert by primary key, so a replayed or repeated snapshot is harmless. `commit(txn)` saves the
transaction's checkpoint. `close()` releases everything.

Flow control: a broker may answer a fetch with a partition's whole backlog (noida-db ignores
fetch sizes), so a subscriber far behind would get one partition after another and the merge,
which releases only up to the lowest partition's watermark, would buffer (and spill) all but
the last before releasing anything. Once `read_ahead` events are buffered, the partitions
whose watermark is above the merge's are paused; each is resumed as soon as the merge's
watermark reaches its own. A paused partition has already handed over every event at or
below its watermark (the protocol puts a watermark after what it covers), so pausing never
holds back a release, the partitions the merge waits for are never paused, and the buffer
stays near `read_ahead` events plus one polled batch. Pausing changes nothing the merge
decides: the same transactions are released in the same order with the same checkpoints.

Guarantee: the store's (`CheckpointStore.guarantee`). After a crash the subscriber resumes
from the last saved checkpoint: nothing after it is lost, nothing at or before it is
delivered again; the transactions handled after it are delivered again (at least once) unless
the handler saved the checkpoint inside its own database transaction (`SqlCheckpointStore.
save_in`: exactly once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from rowbus.clients.kafka import KafkaReader, read_to_end, records_of
from rowbus.clients.prometheus import Readings
from rowbus.consumers.exceptions import SubscriberError
from rowbus.consumers.stores.base import CheckpointStore, Guarantee, MemoryCheckpointStore
from rowbus.merge.checkpoint import Lane, TopicPartition
from rowbus.merge.merger import Blocker, Merger
from rowbus.merge.spill import SpillStore
from rowbus.merge.start import StartFrom, resolve
from rowbus.merge.transaction import Transaction
from rowbus.protocol.codec import decode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    DdlChange,
    Heartbeat,
    ReaderCheckpoint,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
)
from rowbus.protocol.hlc import physical_ms
from rowbus.protocol.topics import (
    CHECKPOINTS_TOPIC,
    DEFAULT_DATA_TOPIC_TEMPLATE,
    SCHEMAS_TOPIC,
    data_topic,
)

log = logging.getLogger(__name__)

DEFAULT_READ_AHEAD = 20_000
"""Buffered events beyond which partitions ahead of the merge are paused (kept below the
memory limit, so a backlog spread over partitions is merged without spilling)."""
DEFAULT_MEMORY_LIMIT = 50_000
"""Buffered events kept in memory before the merger spills: about 50 MB of decoded events of a
few short columns (~1 KB each in Python). It was 200,000 (~215 MB, a quarter of what a 1M-row
transaction cost the Subscriber in benchmarks/bounded.py)."""
QUEUED_KBYTES = 16 * 1024
"""librdkafka's pre-fetch queue (``queued.max.messages.kbytes``, default 64 MB): a Kafka that
honours fetch sizes keeps at most this much read ahead of the merger."""


class Subscriber:
    """Merged, whole transactions from `topics`; see the module docstring.

    `sources`: sources expected on the topics (each on the topic `topic_template` gives it; one
    that gives none of them: on those no source is known on); the readers' checkpoints topic
    adds the sources it knows. `start` applies when the store
    holds no checkpoint yet. `memory_limit`: buffered events in memory before spilling.
    `read_ahead`: buffered events beyond which partitions ahead of the merge are paused (at
    most half the memory limit; None: never pause); see the module docstring.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topics: Sequence[str],
        *,
        store: CheckpointStore | None = None,
        start: StartFrom | None = None,
        sources: Sequence[str] = (),
        topic_template: str = DEFAULT_DATA_TOPIC_TEMPLATE,
        checkpoints_topic: str = CHECKPOINTS_TOPIC,
        schemas_topic: str = SCHEMAS_TOPIC,
        group_id: str = "rowbus-subscriber",
        memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
        read_ahead: int | None = DEFAULT_READ_AHEAD,
        spill_dir: Path | None = None,
        batch_size: int = 2000,
        stall_report_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not topics:
            raise SubscriberError("subscribe to at least one topic")
        self._config = {
            "queued.max.messages.kbytes": QUEUED_KBYTES,
            **kafka_config,
            "group.id": group_id,
        }
        self.topics = tuple(topics)
        self.store = store or MemoryCheckpointStore()
        self._start = start or StartFrom.earliest()
        self._sources = tuple(sources)
        self._template = topic_template
        self._checkpoints_topic = checkpoints_topic
        self._schemas_topic = schemas_topic
        self._memory_limit = memory_limit
        if read_ahead is not None and memory_limit is not None:
            read_ahead = min(read_ahead, memory_limit // 2)
        self._read_ahead = None if read_ahead is None else max(1, read_ahead)
        self._paused: set[TopicPartition] = set()
        self.pauses = 0
        """How many times a partition was paused (ahead of the merge)."""
        self._spill_dir = spill_dir
        self._batch = batch_size
        self._stall_report_s = stall_report_s
        self._clock = clock
        self._reader: KafkaReader | None = None
        self._merger: Merger | None = None
        self._spill: SpillStore | None = None
        self._schemas: dict[int, TableSchema] = {}
        self._last_progress = 0.0
        self._last_report = 0.0
        self.events_read = 0

    def prometheus(self) -> Readings:
        """What a subscriber's process exports (`rowbus.clients.prometheus`)."""
        merger = self._merger
        if merger is None:
            return {"records_in_total": self.events_read}
        stats = merger.stats
        watermark = merger.watermark
        return {
            "records_in_total": self.events_read,
            "duplicates_total": stats.duplicates,
            "transactions_out_total": stats.released_transactions,
            "rows_out_total": stats.released_events,
            "spilled_events_total": stats.spilled_events,
            "buffered_events": merger.buffered,
            "paused_partitions": len(self._paused),
            "watermark_ts": watermark,
            "lag_ms": max(0, int(time.time() * 1000) - physical_ms(watermark)) if watermark else 0,
            "lane_watermark_ts": {
                f"{t}[{p}]/{s}": ts for (t, p, s), ts in merger.lane_watermarks().items()
            },
        }

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, resolve where to start, assign the partitions."""
        self.store.open()
        reader = self._reader = KafkaReader(self._config)
        reader.open()
        partitions = {t: reader.partitions(t) for t in self.topics}
        bounds = {(t, p): reader.bounds((t, p)) for t, ps in partitions.items() for p in ps}
        index = records_of(self._read(self._checkpoints_topic), ReaderCheckpoint)
        self._load_schemas()
        lanes = self._expected_lanes(partitions, index)
        if not lanes:
            raise SubscriberError(
                f"no source is known on {', '.join(self.topics)}: name the sources, or start "
                f"the readers first so {self._checkpoints_topic} lists them"
            )
        checkpoint = self.store.load()
        earliest = {tp: low for tp, (low, _) in bounds.items()}
        if checkpoint is not None:
            offsets = {**earliest, **checkpoint.offsets}
            floors, watermarks = dict(checkpoint.floors), dict(checkpoint.watermarks)
            log.info("resuming from the stored checkpoint at ts %s", checkpoint.ts)
        else:
            offsets, floors = resolve(self._start, index, earliest)
            watermarks = {}
            log.info("starting from %s", self._start.kind)
        if self._memory_limit is not None:
            self._spill = SpillStore(self._spill_dir)
        self._merger = Merger(
            lanes,
            floors=floors,
            start_offsets=offsets,
            watermarks=watermarks,
            memory_limit=self._memory_limit,
            spill=self._spill,
            clock=self._clock,
        )
        reader.assign(offsets)
        self._paused.clear()
        self._last_progress = self._last_report = self._clock()

    def close(self) -> None:
        """Release the consumer, the store and the spill folder."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.store.close()
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _read(self, topic: str) -> list[Any]:
        return read_to_end(self._config, topic)

    def _load_schemas(self) -> None:
        for record in records_of(self._read(self._schemas_topic), SchemaRecord):
            self._schemas[record.schema_id] = record.table_schema

    def _expected_lanes(
        self, partitions: Mapping[str, list[int]], index: Iterable[ReaderCheckpoint]
    ) -> list[Lane]:
        pairs: set[tuple[str, str]] = set()
        for source in self._sources:
            try:
                topic = data_topic(self._template, source)
            except ProtocolError:
                topic = None  # a per-table template: the checkpoints topic names the topics
            if topic is not None and topic in partitions:
                pairs.add((topic, source))
            elif topic is None:
                pairs.update((t, source) for t in partitions)
        for cp in index:
            pairs.update((t, cp.source) for t, _, _ in cp.offsets if t in partitions)
        # A source named but placed on none of the topics (neither by the template nor by a
        # checkpoint) is expected on the topics no source is known on: naming both the topic
        # and the source says it is there (`rowbus tail TOPIC --source NAME`).
        placed = {s for _, s in pairs}
        unknown = [t for t in partitions if all(t != pt for pt, _ in pairs)]
        pairs.update((t, s) for s in self._sources if s not in placed for t in unknown)
        return sorted((t, p, s) for t, s in pairs for p in partitions[t])

    # -- reading ---------------------------------------------------------------------------

    @property
    def merger(self) -> Merger:
        if self._merger is None:
            raise SubscriberError("the subscriber is not started")
        return self._merger

    def poll(self, timeout: float = 0.5) -> list[Transaction]:
        """Read what is there (waiting at most `timeout` s) and return the released
        transactions, in order."""
        merger = self.merger
        assert self._reader is not None
        for msg in self._reader.consume(self._batch, timeout):
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            where = f"{topic}[{partition}]@{offset}"
            event = decode(msg.value(), msg.headers(), where)
            if not isinstance(
                event, RowChange | DdlChange | SnapshotBegin | SnapshotEnd | Resolved | Heartbeat
            ):
                log.warning("skipped a %s at %s", type(event).__name__, where)
                continue
            merger.push(topic, partition, offset, event)
            self.events_read += 1
        released = merger.release()
        self._pace()
        now = self._clock()
        if released:
            self._last_progress = now
        elif (
            merger.buffered
            and now - self._last_progress > self._stall_report_s
            and now - self._last_report > self._stall_report_s
        ):
            self._last_report = now
            log.warning(
                "the merge has waited %.0fs with %d events buffered: %s",
                now - self._last_progress,
                merger.buffered,
                "; ".join(str(b) for b in merger.blocked_by()),
            )
        return released

    def _pace(self) -> None:
        """Pause the partitions ahead of the merge while it buffers `read_ahead` events or more;
        resume each paused one the merge waits for (see the module docstring)."""
        if self._read_ahead is None:
            return
        assert self._reader is not None
        merger = self.merger
        lowest: dict[TopicPartition, int] = {}
        for (topic, partition, _), wm in merger.lane_watermarks().items():
            tp = (topic, partition)
            lowest[tp] = min(wm, lowest.get(tp, wm))
        mark = min(lowest.values(), default=0)
        resume = sorted(tp for tp in self._paused if lowest.get(tp, mark) <= mark)
        pause = []
        if merger.buffered >= self._read_ahead:
            pause = sorted(tp for tp, wm in lowest.items() if wm > mark and tp not in self._paused)
        if resume:
            self._reader.resume(resume)
            self._paused.difference_update(resume)
            log.debug("resumed %s: the merge's watermark reached theirs", resume)
        if pause:
            self._reader.pause(pause)
            self._paused.update(pause)
            self.pauses += len(pause)
            log.debug(
                "paused %s: %d events buffered, their watermarks are above the merge's %s",
                pause,
                merger.buffered,
                mark,
            )

    @property
    def paused(self) -> frozenset[TopicPartition]:
        """The partitions paused because they run ahead of the merge."""
        return frozenset(self._paused)

    def blocked_by(self) -> list[Blocker]:
        """Why the merge waits (see `Merger.blocked_by`)."""
        return self.merger.blocked_by()

    def transactions(
        self, *, idle_timeout: float | None = None, poll_timeout: float = 0.5
    ) -> Iterator[Transaction]:
        """Transactions as they are released; ends after `idle_timeout` s without one
        (never, when None). Commit with `commit(txn)`."""
        idle_since = self._clock()
        while True:
            batch = self.poll(poll_timeout)
            if batch:
                idle_since = self._clock()
                yield from batch
            elif idle_timeout is not None and self._clock() - idle_since >= idle_timeout:
                return

    def __iter__(self) -> Iterator[Transaction]:
        return self.transactions()

    def commit(self, txn: Transaction) -> None:
        """Save the checkpoint just after `txn` in the store."""
        self.store.save(txn.checkpoint)

    def run(
        self,
        handler: Callable[[Transaction], None],
        *,
        max_transactions: int | None = None,
        idle_timeout: float | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> int:
        """Hand each transaction to `handler`; return how many. `idle_timeout`: stop after
        this many seconds in which nothing was read.

        With an at-least-once store the checkpoint is saved after each polled batch; with an
        exactly-once store the handler saves it itself (``store.save_in(conn, txn.checkpoint)``).
        """
        done = 0
        idle_since = self._clock()
        auto_commit = self.store.guarantee is Guarantee.AT_LEAST_ONCE
        while not should_stop():
            read_before = self.events_read
            batch = self.poll()
            if max_transactions is not None:
                batch = batch[: max_transactions - done]
            for txn in batch:
                handler(txn)
                done += 1
            if batch or self.events_read > read_before:
                idle_since = self._clock()
            if batch and auto_commit:
                self.commit(batch[-1])
            elif idle_timeout is not None and self._clock() - idle_since >= idle_timeout:
                break
            if max_transactions is not None and done >= max_transactions:
                break
        return done

    # -- schemas ---------------------------------------------------------------------------

    def table(self, event: RowChange) -> TableSchema:
        """The table schema of a row (re-reads the schemas topic once on an unknown id)."""
        schema = self._schemas.get(event.schema_id)
        if schema is None:
            self._load_schemas()
            schema = self._schemas.get(event.schema_id)
        if schema is None:
            raise SubscriberError(
                f"schema id {event.schema_id} of {event.schema}.{event.table} is not in "
                f"{self._schemas_topic}"
            )
        return schema


__all__ = ["Subscriber", "TopicPartition"]
