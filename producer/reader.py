"""The reader: one source server to the protocol on Kafka, exactly once.

`Reader.run(stop)` loops: win the election for the source (`rowbus.producer.leader`), then lead —
fence older producers (``init_transactions``), load the last checkpoint, check the server, and
tail the binlog from the checkpoint's transaction end. Whole transactions are batched
(`rowbus.producer.batch`) and each batch is one Kafka transaction holding its events, a `Resolved`
(or a `Heartbeat` when idle and caught up) to every partition, and the `ReaderCheckpoint`. The
records go to the open Kafka transaction as the batch fills (`rowbus.producer.commits`), and a
commit due while tailing ends on a thread of its own while the next batch is read (none of which
is produced before that commit returns): the Kafka client's threads and the broker's round
trips overlap the reading, on a second core where there is one. A
delivery error aborts the transaction before the checkpoint moves; leadership lost, a fenced
producer or a dropped stream end the term, and the next term resumes from the committed
checkpoint. `stop` (SIGTERM/SIGINT in the CLI) finishes the open batch, commits it with a final
`Resolved` and gives leadership up.

The parts, one job each: `term` opens a term, `snapshotting` reads its snapshots, `tail` its
binlog, `commits` commits its batches; this module holds the election loop that composes them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable

from rowbus.clients.election import Election, Unopposed
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.clients.settings import SourceConnection
from rowbus.producer.commits import CommitPipeline
from rowbus.producer.exceptions import FencedError, LeadershipLostError, ReaderError
from rowbus.producer.leader import ZooKeeperLeadership, leader_path
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.online_ddl import is_tool_table
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.server import SourceServer
from rowbus.producer.settings import ReaderSettings, Services, deployment_id
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.producer.snapshotting import SnapshotDriver
from rowbus.producer.stall import StableWatch
from rowbus.producer.tables import TableFilter
from rowbus.producer.tail import Tail
from rowbus.producer.term import TermOpener
from rowbus.protocol.codec import Encoding
from rowbus.protocol.events import BinlogPosition

log = logging.getLogger(__name__)

MAX_TERM_FAILURES = 20


def default_reader_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def derived_server_id(source: str) -> int:
    """A replica server id shared by every reader of `source`: a new leader's binlog connection
    makes the server drop a zombie's one."""
    return 1_000_000 + zlib.crc32(source.encode()) % 2_000_000_000


class Reader:
    """Tails one source and publishes it. Construct (no I/O), then `run(stop)`.

    Composes one part per job: `TermOpener` (a term's start: the source checked, the
    checkpoint loaded, the resume point), `SnapshotDriver` (the snapshots), `Tail` (the tail
    loop) and `CommitPipeline` (each batch one Kafka transaction with its checkpoint); `run`
    holds the election and the terms' lifecycle."""

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
        table_filter = TableFilter(
            source.include_schemas or settings.include_schemas,
            settings.exclude_schemas,
            settings.include_tables,
            settings.exclude_tables,
            SYSTEM_SCHEMAS,
            is_tool_table if settings.online_ddl else None,
        )
        if leadership is None:
            if settings.election and services.zookeeper_hosts:
                path = leader_path(services.zookeeper_root, source.name)
                leadership = ZooKeeperLeadership(
                    services.zookeeper_hosts,
                    path,
                    self.reader_id,
                    services.zookeeper_session_timeout_s,
                    services.zookeeper_auth,
                )
            else:
                leadership = Unopposed()
        self.leadership = leadership
        # The debezium encoding renders data records only; the reader's own records (its
        # checkpoints, schemas, fragments) stay in protobuf, which it reads back on restart.
        encoding = (
            Encoding.PROTOBUF if settings.encoding == "debezium" else Encoding(settings.encoding)
        )
        self._terms = TermOpener(
            source,
            settings,
            services,
            self.reader_id,
            self.server_id,
            self.transactional_id,
            table_filter,
            encoding,
            wall,
        )
        self._commits = CommitPipeline(
            source.name,
            self.reader_id,
            settings,
            services.kafka,
            encoding,
            leadership,
            self.metrics,
            wall,
            monotonic,
        )
        self.stable: StableWatch = self._commits.stable
        self._snapshots = SnapshotDriver(
            source,
            settings,
            services.kafka,
            table_filter,
            lambda term: self._commits.commit(term, heartbeat=False),
            wall,
        )
        self._tail = Tail(
            source,
            settings,
            self.reader_id,
            self.server_id,
            table_filter,
            self._commits,
            self._snapshots,
            leadership,
            self.metrics,
            wall,
        )

    @property
    def committed(self) -> BinlogPosition | None:
        """The binlog position of the last committed checkpoint (for status and benchmarks)."""
        return self._commits.committed

    @property
    def snapshot(self) -> SnapshotState | None:
        """The running or last snapshot's progress (for status and benchmarks)."""
        return self._snapshots.snapshot

    # ---- election and terms ---------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Lead whenever elected, until `stop` is set. Raises a fatal `ReaderError`."""
        failures = 0
        self.leadership.start()
        try:
            while not stop.is_set():
                prepared: tuple[SourceServer, KafkaPublisher] | None = None
                committed = self.metrics.batches
                try:
                    prepared = self._terms.prepare()
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
                    # A term that committed more than its opening commit got somewhere: only
                    # failures in a row end the reader, not a few over its lifetime.
                    failures = 1 if self.metrics.batches > committed + 1 else failures + 1
                    if failures > MAX_TERM_FAILURES:
                        raise
                    self.metrics.errors[type(exc).__name__] += 1
                    log.warning("%s: %s; retrying (%d)", self.reader_id, exc, failures)
                    stop.wait(min(5.0, 0.2 * 2**failures))
                finally:
                    if not stop.is_set():
                        # Stopping, `close` below ends the session, which gives leadership
                        # up as well, and does not wait for a ZooKeeper that may be gone.
                        self.leadership.release()
                    if prepared is not None:
                        prepared[1].close()
                        prepared[0].close()
        finally:
            self.leadership.close()

    def _lead(self, stop: threading.Event, server: SourceServer, publisher: KafkaPublisher) -> None:
        try:
            term = self._terms.open(server, publisher)
        except BaseException:
            publisher.close()
            server.close()
            raise
        try:
            # Publish at once: a takeover is visible (new epoch) and a zombie is found out early.
            self._commits.commit(term, heartbeat=False)
            log.info(
                "%s took over %s at binlog %s (epoch %d)",
                self.reader_id,
                self.source.name,
                term.resume,
                term.epoch,
            )
            if term.prepared is not None and not self._snapshots.read(term, stop):
                self._commits.commit(term, heartbeat=False)
                return
            self._tail.run(term, stop)
            if not self.leadership.lost:
                self._commits.commit(term, heartbeat=False)  # the final Resolved of a graceful stop
                log.info("%s stopped at binlog %s", self.reader_id, term.resume)
        finally:
            self._commits.settle(term, quiet=True)
            if term.prepared is not None:
                term.prepared.close()
            if term.incremental is not None:
                term.incremental.close()
            term.publisher.close()
            term.server.close()
            # The commit thread (the stall check's user) was joined above: drop the client.
            self._commits.close()
