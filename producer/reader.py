"""The reader: one source server to the protocol on Kafka, exactly once.

`Reader.run(stop)` loops: win the election for the source (`rowbus.producer.leader`), then lead —
fence older producers (``init_transactions``), load the last checkpoint, check the server, and
tail the binlog from the checkpoint's transaction end. Whole transactions are batched
(`rowbus.producer.batch`) and each batch is one Kafka transaction holding its events, a `Resolved`
(or a `Heartbeat` when idle and caught up) to every partition, and the `ReaderCheckpoint`. A
delivery error aborts the transaction before the checkpoint moves; leadership lost, a fenced
producer or a dropped stream end the term, and the next term resumes from the committed
checkpoint. `stop` (SIGTERM/SIGINT in the CLI) finishes the open batch, commits it with a final
`Resolved` and gives leadership up.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rowbus.clients.election import Election, Unopposed
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import DdlItem, Rows, ServerHeartbeat, TransactionAssembler
from rowbus.producer.batch import Batcher, FlushPolicy
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.checkpoints import load_checkpoints
from rowbus.producer.exceptions import (
    FencedError,
    LeadershipLostError,
    ReaderError,
    SourceUnavailableError,
)
from rowbus.producer.leader import ZooKeeperLeadership, leader_path
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.positions import GtidState, parse_start
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.server import SourceServer
from rowbus.producer.settings import ReaderSettings, Services, deployment_id
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import SchemaTracker
from rowbus.producer.xa_watch import PreparedXaWatch
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.ddl import ParsedDdl
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint, TableSchema
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import Dispatch, DispatchRule, Partitioner
from rowbus.protocol.topics import (
    CHECKPOINTS_TOPIC_CONFIG,
    CHECKPOINTS_TOPIC_PARTITIONS,
    DATA_TOPIC_CONFIG,
    SCHEMAS_TOPIC_CONFIG,
    SCHEMAS_TOPIC_PARTITIONS,
    checkpoint_key,
    data_topic,
    fragment_key,
    per_table,
)

log = logging.getLogger(__name__)

MAX_STREAM_RETRIES = 30
MAX_TERM_FAILURES = 20


def default_reader_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def derived_server_id(source: str) -> int:
    """A replica server id shared by every reader of `source`: a new leader's binlog connection
    makes the server drop a zombie's one."""
    return 1_000_000 + zlib.crc32(source.encode()) % 2_000_000_000


@dataclass
class _Term:
    """State of one leadership term."""

    server: SourceServer
    publisher: KafkaPublisher
    batcher: Batcher
    gtid: GtidState
    epoch: int
    resume: BinlogPosition
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    last_publish: float = 0.0
    tracker: SchemaTracker | None = None

    def __post_init__(self) -> None:
        if self.tracker is None:
            self.tracker = SchemaTracker(self.server.table_extras)


class Reader:
    """Tails one source and publishes it. Construct (no I/O), then `run(stop)`."""

    def __init__(
        self,
        source: SourceConnection,
        settings: ReaderSettings,
        services: Services,
        leadership: Election | None = None,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.settings = settings
        self.services = services
        self.reader_id = settings.reader_id or default_reader_id()
        self.deployment = settings.deployment or deployment_id(
            services.zookeeper_root, settings.checkpoints_topic
        )
        # Per deployment: another deployment reading a source of the same name must never
        # fence this one (nor be fenced by it).
        self.transactional_id = f"rowbus-reader-{self.deployment}-{source.name}"
        # Likewise the replica server id: two deployments' readers of one server never clash.
        self.server_id = settings.server_id or derived_server_id(f"{self.deployment}/{source.name}")
        self.metrics = ReaderMetrics()
        self.committed: BinlogPosition | None = None
        """The binlog position of the last committed checkpoint (for status and benchmarks)."""
        self._wall = wall
        self._monotonic = monotonic
        self._encoding = Encoding(settings.encoding)
        self._filter = TableFilter(
            settings.include_schemas,
            settings.exclude_schemas,
            settings.include_tables,
            settings.exclude_tables,
            SYSTEM_SCHEMAS,
        )
        self._rules = {
            pattern: Dispatch(DispatchRule(d.rule), tuple(d.columns))
            for pattern, d in settings.dispatch.items()
        }
        if leadership is None:
            if settings.election and services.zookeeper_hosts:
                path = leader_path(services.zookeeper_root, source.name)
                leadership = ZooKeeperLeadership(
                    services.zookeeper_hosts,
                    path,
                    self.reader_id,
                    services.zookeeper_session_timeout_s,
                )
            else:
                leadership = Unopposed()
        self.leadership = leadership
        hb = settings.heartbeat_interval_s
        self._server_heartbeat_s = max(0.1, min(settings.flush_interval_s, hb / 4))

    # ---- terms ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Lead whenever elected, until `stop` is set. Raises a fatal `ReaderError`."""
        failures = 0
        self.leadership.start()
        try:
            while not stop.is_set():
                prepared: tuple[SourceServer, KafkaPublisher] | None = None
                try:
                    prepared = self._prepare()
                    if not self.leadership.acquire(stop):
                        break
                    self._lead(stop, *prepared)
                    prepared = None
                    failures = 0
                except (FencedError, LeadershipLostError) as exc:
                    self.metrics.errors[type(exc).__name__] += 1
                    log.warning("%s: %s; back to the election", self.reader_id, exc)
                except ReaderError as exc:
                    if self.leadership.lost:
                        # Whatever failed, the term ended because another reader took over
                        # (a woken zombie's client may report only a bare failure).
                        self.metrics.errors["LeadershipLostError"] += 1
                        log.warning(
                            "%s: %s after losing leadership; back to the election",
                            self.reader_id,
                            exc,
                        )
                        continue
                    if not exc.retryable:
                        raise
                    failures += 1
                    if failures > MAX_TERM_FAILURES:
                        raise
                    self.metrics.errors[type(exc).__name__] += 1
                    log.warning("%s: %s; retrying (%d)", self.reader_id, exc, failures)
                    stop.wait(min(5.0, 0.2 * 2**failures))
                finally:
                    self.leadership.release()
                    if prepared is not None:
                        prepared[1].close()
                        prepared[0].close()
        finally:
            self.leadership.close()

    def _prepare(self) -> tuple[SourceServer, KafkaPublisher]:
        """What a standby does before it is elected, so a takeover is quick: check the source,
        create the Kafka clients and the system topics (nothing that fences the leader)."""
        s = self.settings
        server = SourceServer(self.source).connect()
        publisher = KafkaPublisher(
            {**self.services.kafka, **s.kafka}, self.transactional_id, s.transaction_timeout_ms
        )
        try:
            server.check()
            publisher.prepare()
            publisher.partitions(
                s.checkpoints_topic, CHECKPOINTS_TOPIC_PARTITIONS, CHECKPOINTS_TOPIC_CONFIG
            )
            publisher.partitions(s.schemas_topic, SCHEMAS_TOPIC_PARTITIONS, SCHEMAS_TOPIC_CONFIG)
            if not per_table(s.topic_template):
                # The source's one data topic, made before anything asks about it by name.
                publisher.partitions(
                    data_topic(s.topic_template, self.source.name),
                    s.partitions,
                    DATA_TOPIC_CONFIG,
                    "reader.partitions",
                )
        except BaseException:
            publisher.close()
            server.close()
            raise
        return server, publisher

    def _open_term(self, server: SourceServer, publisher: KafkaPublisher) -> _Term:
        s = self.settings
        publisher.start()
        stored = load_checkpoints(self.services.kafka, s.checkpoints_topic, self.source.name)
        checkpoint, fragment = stored.checkpoint, stored.fragment
        if checkpoint is not None:
            resume = checkpoint.position
            server.ensure_available(resume, "checkpoint position")
            gtid = GtidState(checkpoint.gtid_set)
            clock = HybridClock(checkpoint.ts)
            epoch = checkpoint.epoch + 1
            offsets = {(t, p): o for t, p, o in checkpoint.offsets}
        else:
            resume = server.locate(parse_start(s.start, self.source.name), self.server_id)
            gtid = GtidState(resume.gtid or server.gtid_at(resume.file, resume.offset))
            clock, epoch, offsets = HybridClock(), 1, {}
        batcher = Batcher(
            self.source.name,
            clock,
            s.topic_template,
            lambda topic: publisher.partitions(
                topic, s.partitions, DATA_TOPIC_CONFIG, "reader.partitions"
            ),
            lambda n: Partitioner(n, self._rules),
            lambda item: self._ddl_schema(server, item),
            s.schemas_topic,
            self._encoding,
            FlushPolicy(s.flush_rows, s.flush_bytes, s.flush_interval_s, s.heartbeat_interval_s),
        )
        if checkpoint is not None and fragment is not None:
            batcher.resume_stream(fragment)
        log.info(
            "%s leads source %s (epoch %d) from binlog %s:%s gtid=%s",
            self.reader_id,
            self.source.name,
            epoch,
            resume.file,
            resume.offset,
            gtid or None,
        )
        return _Term(server, publisher, batcher, gtid, epoch, resume, offsets)

    def _ddl_schema(self, server: SourceServer, item: DdlItem) -> TableSchema | None:
        target = item.parsed.table
        if target is None or item.parsed.kind.value.startswith("drop"):
            return None
        return server.table_schema(target.schema, target.table)

    def _lead(self, stop: threading.Event, server: SourceServer, publisher: KafkaPublisher) -> None:
        try:
            term = self._open_term(server, publisher)
        except BaseException:
            publisher.close()
            server.close()
            raise
        try:
            # Publish at once: a takeover is visible (new epoch) and a zombie is found out early.
            self._commit(term, heartbeat=False)
            log.info(
                "%s took over %s at binlog %s (epoch %d)",
                self.reader_id,
                self.source.name,
                term.resume,
                term.epoch,
            )
            self._tail(term, stop)
            if not self.leadership.lost:
                self._commit(term, heartbeat=False)  # the final Resolved of a graceful stop
                log.info("%s stopped at binlog %s", self.reader_id, term.resume)
        finally:
            term.publisher.close()
            term.server.close()

    # ---- tailing --------------------------------------------------------------------------------

    def _tail(self, term: _Term, stop: threading.Event) -> None:
        retries = 0
        while not stop.is_set():
            stream = BinlogStream(
                self.source,
                self.server_id,
                term.resume.file,
                term.resume.offset,
                self._filter,
                heartbeat_s=self._server_heartbeat_s,
                tracker=term.tracker,
            )
            try:
                self._follow(term, stream, stop)
                return
            except SourceUnavailableError as exc:
                retries += 1
                if retries > MAX_STREAM_RETRIES:
                    raise
                log.warning(
                    "%s; reconnecting from binlog %s (attempt %d)", exc, term.resume, retries
                )
                stop.wait(min(5.0, 0.1 * 2**retries))
            finally:
                stream.close()

    def _follow(self, term: _Term, stream: BinlogStream, stop: threading.Event) -> None:
        assembler = TransactionAssembler(term.resume.file, term.resume.offset, self._ddl_wanted)
        batcher = term.batcher
        metrics = self.metrics
        leadership = self.leadership
        wall = self._wall
        hb_gap = self.settings.heartbeat_interval_s * 0.95
        # Binlog timestamps have 1 s resolution: an event committed this recently means the
        # reader is tailing live traffic even when the server never idles long enough to send
        # its own heartbeat (other schemas keep it busy).
        live_ms = int(self.settings.heartbeat_interval_s * 1000) + 1000
        last_commit_ms = 0
        fragment_rows = self.settings.fragment_rows
        xa_watch = PreparedXaWatch(self.source.name, self.settings.xa_prepared_warn_s, metrics)
        xa_checked = 0.0
        for event in stream.events():
            metrics.events += 1
            if leadership.lost:
                raise LeadershipLostError(f"{self.reader_id} lost leadership of {self.source.name}")
            now = wall()
            if now - xa_checked >= 1.0 and (assembler.prepared or metrics.xa_prepared):
                xa_watch.check(assembler.held_xa(), now)
                xa_checked = now
            idle = not batcher.batch.stats.events and now - term.last_publish >= hb_gap
            if isinstance(event, ServerHeartbeat):
                caught_up = (
                    not assembler.in_transaction
                    and event.file == assembler.file
                    and event.pos == assembler.event_end
                )
                if caught_up and idle:
                    self._commit(term, heartbeat=True, position=assembler.event_position)
                    continue
            else:
                if isinstance(event, Rows) and assembler.open_size >= fragment_rows:
                    # Before the next rows event, so fragments end at rows-event boundaries
                    # and the last part of the transaction is never empty.
                    batcher.stream(*assembler.take_open(), now)
                    metrics.fragments += 1
                    self._commit(term, heartbeat=False)
                txn = assembler.feed(event)
                if txn is not None:
                    if txn.gtid:
                        term.gtid.add(txn.gtid)
                    batcher.add(txn, now)
                    term.resume = txn.end
                    metrics.transactions += 1
                    last_commit_ms = txn.commit_time * 1000
                    metrics.lag_ms = max(0, int(now * 1000) - last_commit_ms)
                    idle = idle and not batcher.batch.stats.events
                    if idle and int(now * 1000) - last_commit_ms <= live_ms:
                        self._commit(term, heartbeat=True, position=txn.end, lag_ms=metrics.lag_ms)
                        continue
            if batcher.due(now):
                self._commit(term, heartbeat=False)
            if stop.is_set() and not assembler.in_transaction:
                return

    def _ddl_wanted(self, schema: str, parsed: ParsedDdl) -> bool:
        if parsed.database is not None:
            return self._filter.schema_wanted(parsed.database)
        if not parsed.tables:
            return self._filter.schema_wanted(schema) if schema else False
        # RENAME across the filter's edge, DROP of several tables: wanted if any table is.
        return any(self._filter.wanted(t.schema, t.table) for t in parsed.touched)

    # ---- publishing -----------------------------------------------------------------------------

    def _commit(
        self,
        term: _Term,
        heartbeat: bool,
        position: BinlogPosition | None = None,
        lag_ms: int = 0,
    ) -> None:
        """One Kafka transaction: the open batch, a watermark to every partition, the checkpoint."""
        if self.leadership.lost:
            raise LeadershipLostError(f"{self.reader_id} lost leadership of {self.source.name}")
        batcher = term.batcher
        now = self._wall()
        if heartbeat:
            assert position is not None
            where = BinlogPosition(position.file, position.offset, term.resume.gtid)
            batcher.add_heartbeat(self.reader_id, where, lag_ms, now)
            self.metrics.heartbeats += 1
        else:
            batcher.add_resolved()
        batch = batcher.take()
        publisher = term.publisher
        started = self._monotonic()
        publisher.begin()
        try:
            publisher.produce(batch.records)
            term.offsets.update(publisher.flush())
            checkpoint = ReaderCheckpoint(
                source=self.source.name,
                position=term.resume,
                gtid_set=str(term.gtid) or None,
                ts=batcher.resume_ts,
                offsets=tuple((t, p, o) for (t, p), o in sorted(term.offsets.items())),
                reader_id=self.reader_id,
                epoch=term.epoch,
            )
            value, headers = encode(checkpoint, self._encoding)
            topic = self.settings.checkpoints_topic
            records = [(topic, None, checkpoint_key(self.source.name), value, headers)]
            open_stream = batcher.open_stream
            if open_stream is not None and open_stream.last is not None:
                # Where the fragments committed so far end (PROTOCOL.md §9.1).
                fragment = replace(checkpoint, position=open_stream.last)
                value, headers = encode(fragment, self._encoding)
                records.append((topic, None, fragment_key(self.source.name), value, headers))
            publisher.produce(records)
            if self.leadership.lost:
                raise LeadershipLostError(
                    f"{self.reader_id} lost leadership of {self.source.name} before commit"
                )
            publisher.commit()
        except FencedError:
            raise
        except ReaderError:
            publisher.abort()
            raise
        elapsed_ms = (self._monotonic() - started) * 1000
        self.metrics.watermark_ts = checkpoint.ts
        term.last_publish = now
        self.committed = term.resume
        m = self.metrics
        m.batches += 1
        m.rows += batch.stats.rows
        m.bytes += batch.stats.bytes
        m.observe_commit(elapsed_ms)
        log.debug(
            "committed %d transactions, %d events up to binlog %s:%s gtid=%s ts=%d in %.1f ms",
            batch.stats.transactions,
            batch.stats.events,
            term.resume.file,
            term.resume.offset,
            term.resume.gtid,
            batcher.resume_ts,
            elapsed_ms,
        )
