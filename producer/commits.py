"""The reader's commit pipeline: each batch one Kafka transaction, ended with its checkpoint.

A batch's records go to the open Kafka transaction as the batch fills (`SEND_RECORDS` at a
time, `CommitPipeline.send_ready`); its commit adds a `Resolved` (or a `Heartbeat`) to every
partition, waits for the records' delivery, produces the `ReaderCheckpoint` with the offsets
they reached (and the tracked table states, and where an open fragmented transaction stands)
and commits. A commit due while tailing ends on a thread of its own while the next batch is
read (none of which is produced before that commit returns). A delivery error aborts the
transaction before the checkpoint moves; a fenced producer or a lost leadership ends the term.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rowbus.clients import kafka
from rowbus.clients.election import Election
from rowbus.producer import faults
from rowbus.producer.exceptions import FencedError, LeadershipLostError, ReaderError
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.records import Batch, BatchStats, OutRecord
from rowbus.producer.settings import ReaderSettings
from rowbus.producer.stall import StableWatch
from rowbus.producer.term import Term, position_key
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint, SchemaRecord, TableSchema
from rowbus.protocol.topics import checkpoint_key, fragment_key, table_state_key

log = logging.getLogger(__name__)

SEND_RECORDS = 1_000
"""Records of the open batch produced at a time, ahead of its commit (`CommitPipeline.send_ready`):
enough that a produce call's fixed costs do not count, few enough that librdkafka starts
sending early in a batch."""


@dataclass
class Ending:
    """A Kafka transaction whose records are produced, to be ended (`CommitPipeline._end`)."""

    batch: Batch
    checkpoint: ReaderCheckpoint
    """The checkpoint but for its offsets (known once the records are delivered)."""
    tables: list[OutRecord]
    fragment: BinlogPosition | None
    offsets: dict[tuple[str, int], int]
    """The term's offsets when the transaction was handed over, updated by `_end`."""
    now: float
    started: float
    error: BaseException | None = None


def produce_in_transaction(publisher: KafkaPublisher, records: list[OutRecord]) -> None:
    """`records` into the open Kafka transaction (begun here if none is); a failure other than
    fencing aborts it (nothing of it becomes visible) and is raised."""
    try:
        if not publisher.in_transaction:
            publisher.begin()
        publisher.produce(records)
    except FencedError:
        raise
    except ReaderError:
        if publisher.in_transaction:
            publisher.abort()
        raise


class CommitPipeline:
    """Commits a term's batches, in binlog order, exactly once. `committed` is the binlog
    position of the last committed checkpoint (for status and benchmarks); `stable` watches the
    committed offsets for partitions a read_committed consumer cannot read."""

    def __init__(
        self,
        source: str,
        reader_id: str,
        settings: ReaderSettings,
        kafka_config: Mapping[str, object],
        encoding: Encoding,
        leadership: Election,
        metrics: ReaderMetrics,
        wall: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self.source = source
        self.reader_id = reader_id
        self.settings = settings
        self._kafka = kafka_config
        self._encoding = encoding
        self.leadership = leadership
        self.metrics = metrics
        self._wall = wall
        self._monotonic = monotonic
        self.committed: BinlogPosition | None = None
        self._admin: object | None = None
        self.stable = StableWatch(self._stalls, settings.stall_check_s)
        self._fault = faults.armed()
        """None but in the tests of kill -9 mid-snapshot (`rowbus.producer.faults`)."""

    def close(self) -> None:
        """Drop the stall check's admin client (the term's commit thread is joined)."""
        self._admin = None

    def send_ready(self, term: Term) -> None:
        """Produce the open batch's final records now, into the Kafka transaction its commit
        ends (begun here if need be), so librdkafka sends them while the next transactions are
        read rather than all at the commit. Nothing is visible before that commit: exactly once
        holds as before; a failure aborts the transaction and ends the term, as at a commit."""
        batch = term.batcher.batch
        if len(batch.records) - batch.sent < SEND_RECORDS:
            return  # the cheap test first: this runs for every transaction read
        ready = term.batcher.ready()
        if ready - batch.sent < SEND_RECORDS:
            return
        if term.in_flight is not None:
            if term.in_flight[0].is_alive():
                return  # read on while the previous batch commits; these go out after it
            self.settle(term)
        produce_in_transaction(term.publisher, batch.records[batch.sent : ready])
        batch.sent = ready

    def commit(
        self,
        term: Term,
        heartbeat: bool,
        position: BinlogPosition | None = None,
        lag_ms: int = 0,
        wait: bool = True,
    ) -> None:
        """One Kafka transaction: the open batch, a watermark to every partition, the checkpoint.

        With ``wait=False`` the transaction's end (waiting for the records' delivery, the
        checkpoint, the commit) runs on a thread of its own while the caller reads on: the
        next batch is built meanwhile but nothing of it is produced before that commit has
        returned (`settle`), so the transactions stay in binlog order, and a failed commit
        ends the term as it does when waited for (the next term resumes from the last
        committed checkpoint, reading that batch and what followed again)."""
        self.settle(term)
        if self.leadership.lost:
            raise LeadershipLostError(f"{self.reader_id} lost leadership of {self.source}")
        batcher = term.batcher
        now = self._wall()
        if heartbeat:
            assert position is not None
            where = replace(position, gtid=term.resume.gtid)
            batcher.add_heartbeat(self.reader_id, where, lag_ms, now)
            self.metrics.heartbeats += 1
        else:
            batcher.add_resolved()
        batch = batcher.take()
        started = self._monotonic()
        records = batch.records[batch.sent :] if batch.sent else batch.records
        produce_in_transaction(term.publisher, records)
        ending = self._ending(term, batch, now, started)
        if wait:
            self._end(term, ending)
            return
        thread = threading.Thread(
            target=self._end_quietly, args=(term, ending), name="rowbus-commit", daemon=True
        )
        term.in_flight = (thread, ending)
        thread.start()

    def settle(self, term: Term, quiet: bool = False) -> None:
        """Wait for the commit running on its own thread, if any; raise its error (unless
        `quiet`: the term is ending anyway)."""
        if term.in_flight is None:
            return
        thread, ending = term.in_flight
        thread.join()
        term.in_flight = None
        if ending.error is not None and not quiet:
            raise ending.error

    def _table_states(self, term: Term, topic: str, ts: int) -> list[OutRecord]:
        """The tracked table states as of the checkpoint (a new term restores them); a table
        not known is stored with no columns."""
        assert term.tracker is not None
        out: list[OutRecord] = []
        if term.online is not None:
            term.online.settled(position_key(term.resume))
        for name, state in term.tracker.durable(position_key(term.resume)):
            table = state or TableSchema(name.schema, name.table, (), ())
            value, headers = encode(SchemaRecord.of(table, self.source, ts), self._encoding)
            key = table_state_key(self.source, name.schema, name.table)
            out.append((topic, None, key, value, headers))
        return out

    def _ending(self, term: Term, batch: Batch, now: float, started: float) -> Ending:
        """What the transaction's end needs, taken from the term now: the reader goes on
        changing the term while a commit runs on its own thread."""
        batcher = term.batcher
        checkpoint = ReaderCheckpoint(
            source=self.source,
            position=term.resume,
            gtid_set=str(term.gtid) or None,
            ts=batcher.resume_ts,
            offsets=(),
            reader_id=self.reader_id,
            epoch=term.epoch,
            upstream_server=term.identity,
            snapshot=None if term.snapshot is None else term.snapshot.to_json(),
        )
        topic = self.settings.checkpoints_topic
        open_stream = batcher.open_stream
        fragment = None
        if open_stream is not None and open_stream.last is not None:
            fragment = open_stream.last  # where the fragments committed so far end (§9.1)
        return Ending(
            batch,
            checkpoint,
            self._table_states(term, topic, checkpoint.ts),
            fragment,
            dict(term.offsets),
            now,
            started,
        )

    def _end(self, term: Term, ending: Ending) -> None:
        """Wait for the records, produce the checkpoint (with the offsets they reached) and
        commit; then the term and the metrics move on."""
        publisher = term.publisher
        try:
            offsets = ending.offsets
            offsets.update(publisher.flush())
            if self._fault is not None:
                self._fault(ending.checkpoint, False)
            checkpoint = replace(
                ending.checkpoint,
                offsets=tuple((t, p, o) for (t, p), o in sorted(offsets.items())),
            )
            value, headers = encode(checkpoint, self._encoding)
            topic = self.settings.checkpoints_topic
            records: list[OutRecord] = [(topic, None, checkpoint_key(self.source), value, headers)]
            records.extend(ending.tables)
            if ending.fragment is not None:
                fragment = replace(checkpoint, position=ending.fragment)
                value, headers = encode(fragment, self._encoding)
                records.append((topic, None, fragment_key(self.source), value, headers))
            publisher.produce(records)
            if self.leadership.lost:
                raise LeadershipLostError(
                    f"{self.reader_id} lost leadership of {self.source} before commit"
                )
            publisher.commit()
            if self._fault is not None:
                self._fault(ending.checkpoint, True)
        except FencedError:
            raise
        except ReaderError:
            publisher.abort()
            raise
        elapsed_ms = (self._monotonic() - ending.started) * 1000
        term.offsets = offsets
        term.last_publish = ending.now
        self.committed = checkpoint.position
        self._committed(term, ending.batch.stats, checkpoint.ts, elapsed_ms)
        log.debug(
            "committed %d transactions, %d events up to binlog %s:%s gtid=%s ts=%d in %.1f ms",
            ending.batch.stats.transactions,
            ending.batch.stats.events,
            checkpoint.position.file,
            checkpoint.position.offset,
            checkpoint.position.gtid,
            checkpoint.ts,
            elapsed_ms,
        )

    def _end_quietly(self, term: Term, ending: Ending) -> None:
        """`_end` on the commit thread: its error waits for `settle`."""
        try:
            self._end(term, ending)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader's thread
            ending.error = exc

    def _committed(self, term: Term, stats: BatchStats, ts: int, elapsed_ms: float) -> None:
        m = self.metrics
        m.watermark_ts = ts
        m.batches += 1
        m.rows += stats.rows
        m.bytes += stats.bytes
        m.observe_commit(elapsed_ms)
        self.stable.committed(term.offsets, self._monotonic())
        m.stalled_partitions = len(self.stable.stalled)

    def _stalls(self, committed: Mapping[tuple[str, int], int]) -> list[kafka.Stall]:
        if self._admin is None:
            self._admin = kafka.admin(self._kafka)
        return kafka.stalls(self._admin, committed)
