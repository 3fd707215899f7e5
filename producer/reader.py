"""The reader: one source server to the protocol on Kafka, exactly once.

`Reader.run(stop)` loops: win the election for the source (`rowbus.producer.leader`), then lead —
fence older producers (``init_transactions``), load the last checkpoint, check the server, and
tail the binlog from the checkpoint's transaction end. Whole transactions are batched
(`rowbus.producer.batch`) and each batch is one Kafka transaction holding its events, a `Resolved`
(or a `Heartbeat` when idle and caught up) to every partition, and the `ReaderCheckpoint`. The
records go to the open Kafka transaction as the batch fills (`SEND_RECORDS` at a time), and a
commit due while tailing ends on a thread of its own while the next batch is read (none of which
is produced before that commit returns): the Kafka client's threads and the broker's round
trips overlap the reading, on a second core where there is one. A
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from rowbus.clients import kafka
from rowbus.clients.election import Election, Unopposed
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import (
    Change,
    DdlItem,
    RowItem,
    Rows,
    ServerHeartbeat,
    Transaction,
    TransactionAssembler,
)
from rowbus.producer.batch import (
    Batch,
    Batcher,
    BatchStats,
    Definition,
    FlushPolicy,
    OutRecord,
)
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.checkpoints import load_checkpoints
from rowbus.producer.debezium import DebeziumBatcher
from rowbus.producer.exceptions import (
    FencedError,
    LeadershipLostError,
    PositionPurgedError,
    ReaderError,
    ServerMisconfiguredError,
    SourceUnavailableError,
)
from rowbus.producer.history import BinlogResetError, check_history
from rowbus.producer.leader import ZooKeeperLeadership, leader_path
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.online_ddl import OnlineDdl, binlog_history, is_tool_table
from rowbus.producer.positions import GtidState, parse_start
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.server import SourceServer
from rowbus.producer.settings import ReaderSettings, Services, deployment_id, snapshot_mode
from rowbus.producer.snapshot.incremental import Incremental
from rowbus.producer.snapshot.initial import Prepared, prepare, unshown
from rowbus.producer.snapshot.progress import Progress
from rowbus.producer.snapshot.runner import ChunkReader
from rowbus.producer.snapshot.signals import SignalWatch
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.producer.stall import StableWatch
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import PositionKey, SchemaTracker
from rowbus.producer.xa_watch import PreparedXaWatch
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.ddl import ParsedDdl, TableName
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.events import (
    BinlogPosition,
    MarkerMode,
    ReaderCheckpoint,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
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
    table_state_key,
)
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

MAX_STREAM_RETRIES = 30
MAX_TERM_FAILURES = 20
SEND_RECORDS = 1_000
"""Records of the open batch produced at a time, ahead of its commit (`Reader._send_ready`):
enough that a produce call's fixed costs do not count, few enough that librdkafka starts
sending early in a batch."""


def _key(position: BinlogPosition) -> PositionKey:
    return (position.file_number, position.file, position.offset)


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
    identity: str | None = None
    """The server's identity, stored with each checkpoint (PROTOCOL.md §9.4)."""
    snapshot: SnapshotState | None = None
    """The snapshot's progress, carried in every checkpoint while it matters."""
    prepared: Prepared | None = None
    """Read views of a snapshot still to read (closed when the term ends)."""
    incremental: Incremental | None = None
    """Incremental snapshots asked by `rowbus snapshot` (with ``reader.signal_topic``)."""
    online: OnlineDdl | None = None
    """The ghost tables' ALTERs read in this term (``reader.online_ddl``)."""
    in_flight: tuple[threading.Thread, _Ending] | None = None
    """The commit running on its own thread (`Reader._commit` with ``wait=False``)."""

    def __post_init__(self) -> None:
        if self.tracker is None:
            server = self.server
            self.tracker = SchemaTracker(
                server.table_extras, server.charsets, server.database_collation
            )

    def restore_tables(self, tables: Mapping[TableName, TableSchema | None]) -> None:
        """The table states stored with the checkpoint this term resumes from."""
        assert self.tracker is not None
        self.tracker.restore(tables)


@dataclass
class _Ending:
    """A Kafka transaction whose records are produced, to be ended (`Reader._end`)."""

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


def _snapshot_id(state: SnapshotState, table: str) -> str:
    """The id of an initial or reset snapshot of `table` (PROTOCOL.md §9.7), and the prefix of
    its transactions' ids: its position names the snapshot (a reset one has a higher
    upstream), so it is unique in the source (§9.5 item 2)."""
    pos = state.position
    return f"snapshot:{pos.upstream}/{pos.file}:{pos.offset}:{table}"


def _produce_in_transaction(publisher: KafkaPublisher, records: list[OutRecord]) -> None:
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


def _caught_up(assembler: TransactionAssembler, event: ServerHeartbeat, inc: Incremental) -> bool:
    """Whether the server's heartbeat says the reader read all it has; then an incremental
    snapshot may take its next step."""
    caught_up = (
        not assembler.in_transaction
        and event.file == assembler.file
        and event.pos == assembler.event_end
    )
    if caught_up:
        inc.idle(assembler.event_position)
    return caught_up


def _past_snapshot(snap: SnapshotState | None, txn: Transaction) -> Transaction:
    """`txn` without the changes the rows of a resumed snapshot already show."""
    if snap is not None and snap.tables and snap.done:
        if any(snap.filtering(c.position) for c in txn.changes):
            return unshown(snap, txn)
        if not snap.filtering(txn.end) and any(t.segments for t in snap.tables.values()):
            snap.compact()  # streaming passed every read view
    return txn


def _schemas_only(batcher: Batcher, prepared: Prepared) -> None:
    """schema_only: every table's schema, published with the first commit; no rows."""
    for table in prepared.schemas.values():
        batcher.add_schema(table)
    prepared.close()


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
        self.snapshot: SnapshotState | None = None
        """The running or last snapshot's progress (for status and benchmarks)."""
        self._cascades_told = False
        self._wall = wall
        self._monotonic = monotonic
        self._admin: object | None = None
        self._serving = 0
        """Index in `source.servers()` of the server read last."""
        self.stable = StableWatch(self._stalls, settings.stall_check_s)
        # The debezium encoding renders data records only; the reader's own records (its
        # checkpoints, schemas, fragments) stay in protobuf, which it reads back on restart.
        self._encoding = (
            Encoding.PROTOBUF if settings.encoding == "debezium" else Encoding(settings.encoding)
        )
        self._filter = TableFilter(
            source.include_schemas or settings.include_schemas,
            settings.exclude_schemas,
            settings.include_tables,
            settings.exclude_tables,
            SYSTEM_SCHEMAS,
            is_tool_table if settings.online_ddl else None,
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
                committed = self.metrics.batches
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

    def _prepare(self) -> tuple[SourceServer, KafkaPublisher]:
        """What a standby does before it is elected, so a takeover is quick: check the source,
        create the Kafka clients and the system topics (nothing that fences the leader)."""
        s = self.settings
        server = self._connect_server()
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
        mode = snapshot_mode(s)
        prepared: Prepared | None = None
        state: SnapshotState | None = None
        identity = server.identity()
        if checkpoint is not None:
            resume = checkpoint.position
            gtid = GtidState(checkpoint.gtid_set)
            clock = HybridClock(checkpoint.ts)
            epoch = checkpoint.epoch + 1
            offsets = {(t, p): o for t, p, o in checkpoint.offsets}
            if checkpoint.snapshot is not None:
                state = SnapshotState.from_json(checkpoint.snapshot)
            try:
                resume = self._resume_point(server, identity, checkpoint)
            except PositionPurgedError as exc:
                if mode != "when_needed":
                    raise
                log.warning("%s: %s; taking a new snapshot", self.source.name, exc)
                state, fragment = None, None
                # After a reset the new files start again at 1: the next upstream epoch keeps
                # order keys growing (PROTOCOL.md §9.4).
                prepared = self._new_snapshot(
                    server, checkpoint.position.upstream + isinstance(exc, BinlogResetError)
                )
                resume = prepared.state.position
                gtid = GtidState(resume.gtid)
            if state is not None:
                prepared = self._continue_snapshot(server, state, resume, mode)
        elif mode != "never":
            prepared = self._new_snapshot(server)
            resume = prepared.state.position
            gtid = GtidState(resume.gtid)
            clock, epoch, offsets = HybridClock(), 1, {}
            if mode == "schema_only":
                prepared.state.done = True  # schemas only: published below, then stream
        else:
            resume = server.locate(parse_start(s.start, self.source.name), self.server_id)
            gtid = GtidState(resume.gtid or server.gtid_at(resume.file, resume.offset))
            clock, epoch, offsets = HybridClock(), 1, {}
        if prepared is not None:
            state = prepared.state
        batcher = self._batcher(server, publisher, clock)
        if checkpoint is not None and fragment is not None:
            batcher.resume_stream(fragment)
        if prepared is not None and prepared.state.done:
            _schemas_only(batcher, prepared)
            prepared = None
        log.info(
            "%s leads source %s (epoch %d) from binlog %s:%s gtid=%s",
            self.reader_id,
            self.source.name,
            epoch,
            resume.file,
            resume.offset,
            gtid or None,
        )
        term = _Term(
            server,
            publisher,
            batcher,
            gtid,
            epoch,
            resume,
            offsets,
            snapshot=state,
            prepared=prepared,
            identity=identity,
            online=OnlineDdl(
                binlog_history(lambda: [n for n, _ in server.binary_logs()], server.statements)
            )
            if self.settings.online_ddl
            else None,
        )
        term.restore_tables(stored.tables)
        return term

    def _batcher(
        self, server: SourceServer, publisher: KafkaPublisher, clock: HybridClock
    ) -> Batcher:
        s = self.settings
        if s.encoding == "debezium":
            return self._debezium_batcher(server, publisher, clock)
        return Batcher(
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

    def _debezium_batcher(
        self, server: SourceServer, publisher: KafkaPublisher, clock: HybridClock
    ) -> Batcher:
        s = self.settings
        d = s.debezium
        options = DebeziumOptions(
            d.topic_prefix or self.source.name, d.schemas, d.transaction_metadata
        )
        row = server.query_one("SELECT @@server_id")
        return DebeziumBatcher(
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
            renderer=DebeziumRenderer(options, int(row[0]) if row else 0),
            debezium_topics=d.topics == "debezium",
            wall=self._wall,
        )

    def _continue_snapshot(
        self, server: SourceServer, state: SnapshotState, resume: BinlogPosition, mode: str
    ) -> Prepared | None:
        """The rest of an interrupted snapshot; or, after a finished one, the tables added to
        the configuration since (snapshotted alone, the others not); or nothing."""
        if not state.done:
            return self._prepare_snapshot(server, state, upstream=resume.upstream)
        if mode != "never":
            return self._prepare_snapshot(
                server, state, stream_from=resume, upstream=resume.upstream
            )
        return None

    def _new_snapshot(self, server: SourceServer, upstream: int = 0) -> Prepared:
        prepared = self._prepare_snapshot(server, None, upstream=upstream)
        assert prepared is not None  # a new snapshot always has its state
        return prepared

    def _prepare_snapshot(
        self,
        server: SourceServer,
        state: SnapshotState | None,
        stream_from: BinlogPosition | None = None,
        upstream: int = 0,
    ) -> Prepared | None:
        s = self.settings
        return prepare(
            server, self.source, self._filter, s.snapshot_parallelism, state, stream_from, upstream
        )

    def _warn_cascades(self, server: SourceServer) -> None:
        for child, parent, rule in server.cascading_foreign_keys():
            schema, _, table = child.partition(".")
            if self._filter.wanted(schema, table):
                log.warning(
                    "%s: %s references %s with %s: the rows the server changes for it are not "
                    "in the binlog, so they do not reach consumers (README: Foreign keys)",
                    self.source.name,
                    child,
                    parent,
                    rule,
                )

    def _snapshot(self, term: _Term, stop: threading.Event) -> bool:
        """Read the snapshot's pending tables, each chunk committed with the checkpoint; True
        when it is complete, False when `stop` came first (the next term resumes it)."""
        prepared, state = term.prepared, term.snapshot
        assert prepared is not None
        assert state is not None
        term.prepared = None
        pending = [
            (prepared.schemas[t.name], t.last_key)
            for t in state.pending()
            if t.name in prepared.schemas
        ]
        for t in state.pending():
            if t.name not in prepared.schemas:
                t.done = True
        self.snapshot = state
        # Read before the chunk readers share the views: what creates each table not yet begun.
        creates = {
            t.name: prepared.views[0].create_statements(prepared.schemas[t.name])
            for t in state.pending()
            if t.chunks == 0 and t.name in prepared.schemas
        }
        reader = ChunkReader(prepared.views, pending, self.settings.snapshot_chunk_rows)
        progress = Progress(state)
        try:
            for chunk in reader.chunks():
                table = state.tables[chunk.table.qualified]
                create = creates.pop(table.name, None)
                if create is not None and self.settings.snapshot_markers:
                    # the first chunk: the begin goes before the definitions (§9.7)
                    self._marker(term, chunk.table, _snapshot_id(state, table.name), None)
                if create is not None:
                    state.seq += term.batcher.add_snapshot_ddl(
                        chunk.table,
                        create,
                        f"{_snapshot_id(state, table.name)}:create",
                        state.seq,
                        state.position,
                        self._wall(),
                    )
                if chunk.rows:
                    term.batcher.add_snapshot(
                        chunk.table,
                        chunk.rows,
                        # unique in the source: a reset snapshot's chunks must not share the
                        # ids of the initial one's, or a consumer holding both merges them
                        f"{_snapshot_id(state, table.name)}:{state.restarts}:{table.chunks}",
                        state.seq,
                        state.position,
                        self._wall(),
                    )
                    state.seq += len(chunk.rows)
                    table.rows += len(chunk.rows)
                    table.last_key = chunk.last_key
                table.chunks += 1
                table.done = chunk.last
                if chunk.last and self.settings.snapshot_markers:
                    self._marker(term, chunk.table, _snapshot_id(state, table.name), table.rows)
                self._commit(term, heartbeat=False)
                progress.tick()
                if stop.is_set():
                    log.info("%s: snapshot stopped; it resumes from its last chunk", self.source)
                    return False
            state.done = True
            state.finished = self._wall()
            self._commit(term, heartbeat=False)
            progress.tick(force=True)
            log.info(
                "snapshot of %s done: %s rows in %d tables; streaming from binlog %s",
                self.source.name,
                f"{state.seq:,}",
                len(state.tables),
                state.position,
            )
            return True
        finally:
            reader.close()

    def _marker(
        self,
        term: _Term,
        table: TableSchema,
        snapshot: str,
        rows: int | None,
        at: BinlogPosition | None = None,
    ) -> None:
        """A `SnapshotBegin` (`rows` None) or `SnapshotEnd` of `table`'s snapshot `snapshot`,
        in the Kafka transaction of its first / last chunk, with the next index of the row
        counter: the checkpoint committed with it carries the counter and the chunks done, so
        a restarted reader publishes neither again (PROTOCOL.md §9.7). `at`: an incremental
        snapshot's chunk position (mode refresh); None: the initial or reset snapshot's
        position (mode replace)."""
        state = term.snapshot
        assert state is not None
        pos = state.position if at is None else at
        mode = MarkerMode.REPLACE if at is None else MarkerMode.REFRESH
        now = self._wall()
        ts, name = term.batcher.tick(now), self.source.name
        marker: SnapshotBegin | SnapshotEnd
        if rows is None:
            ref = TxnRef(f"{snapshot}:begin", state.seq)
            marker = SnapshotBegin(
                source=name,
                ts=ts,
                schema=table.schema,
                table=table.table,
                snapshot=snapshot,
                mode=mode,
                position=pos,
                txn=ref,
            )
        else:
            ref = TxnRef(f"{snapshot}:end", state.seq)
            marker = SnapshotEnd(
                source=name,
                ts=ts,
                schema=table.schema,
                table=table.table,
                snapshot=snapshot,
                mode=mode,
                position=pos,
                txn=ref,
                rows=rows,
            )
        term.batcher.add_marker(marker, now)
        state.seq += 1

    def _connect_server(self) -> SourceServer:
        """The server to read: the one read last if it answers, else the next that does."""
        candidates = self.source.servers()
        failed: SourceUnavailableError | None = None
        for step in range(len(candidates)):
            index = (self._serving + step) % len(candidates)
            try:
                server = SourceServer(candidates[index]).connect()
            except SourceUnavailableError as exc:
                failed = failed or exc
                if len(candidates) > 1:
                    log.warning("%s; trying the next server of %s", exc, self.source.name)
                continue
            if index != self._serving:
                log.warning("source %s: switching to %s", self.source.name, server.where)
            self._serving = index
            if not self._cascades_told:
                self._cascades_told = True
                self._warn_cascades(server)
            return server
        assert failed is not None
        raise failed

    def _resume_point(
        self, server: SourceServer, identity: str, checkpoint: ReaderCheckpoint
    ) -> BinlogPosition:
        """Where to continue: the checkpoint's position on its own server; on another server,
        right after the checkpoint's GTID set there, one upstream higher (PROTOCOL.md §9.4)."""
        position = checkpoint.position
        if checkpoint.upstream_server in (None, identity):
            check_history(server, position, checkpoint.gtid_set)
            server.ensure_available(position, "checkpoint position")
            return position
        if not checkpoint.gtid_set:
            raise ServerMisconfiguredError(
                f"{server.where} is not the server of checkpoint {position} "
                f"({checkpoint.upstream_server}), and the checkpoint has no GTID set to find "
                f"the same point there; enable GTIDs, or list only servers with one binlog"
            )
        behind = server.missing_gtids(checkpoint.gtid_set)
        if behind:
            # A replica still applying what the reader already published: wait for it.
            raise SourceUnavailableError(
                f"{server.where} has not yet applied GTIDs {behind} of checkpoint "
                f"{position}; waiting for it to catch up"
            )
        if server.holds_exactly(checkpoint.gtid_set):
            # Nothing after the checkpoint yet (its last GTIDs may predate this server's
            # binlog, e.g. a replica set up from a backup): continue at its end.
            file, offset = server.master_position()
            found = BinlogPosition(file, offset, server.gtid_at(file, offset))
        else:
            spec = parse_start(f"gtid:{checkpoint.gtid_set}", self.source.name)
            found = server.locate(spec, self.server_id)
        resume = replace(found, upstream=position.upstream + 1)
        log.warning(
            "source %s: continuing on %s (%s) at %s after checkpoint %s of %s",
            self.source.name,
            server.where,
            identity,
            resume,
            position,
            checkpoint.upstream_server,
        )
        return resume

    def _committed(self, term: _Term, stats: BatchStats, ts: int, elapsed_ms: float) -> None:
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
            self._admin = kafka.admin(self.services.kafka)
        return kafka.stalls(self._admin, committed)

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
            if term.prepared is not None and not self._snapshot(term, stop):
                self._commit(term, heartbeat=False)
                return
            self._tail(term, stop)
            if not self.leadership.lost:
                self._commit(term, heartbeat=False)  # the final Resolved of a graceful stop
                log.info("%s stopped at binlog %s", self.reader_id, term.resume)
        finally:
            self._settle(term, quiet=True)
            if term.prepared is not None:
                term.prepared.close()
            if term.incremental is not None:
                term.incremental.close()
            term.publisher.close()
            term.server.close()
            # The commit thread (the stall check's user) was joined above: drop the client.
            self._admin = None

    # ---- tailing --------------------------------------------------------------------------------

    def _tail(self, term: _Term, stop: threading.Event) -> None:
        retries = 0
        tracker = term.tracker
        assert tracker is not None
        while not stop.is_set():
            # A new stream reads again from the last transaction end: what the tracker applied
            # after it is undone, so each DDL is applied once.
            tracker.rewind(_key(term.resume))
            if term.online is not None:
                term.online.rewind(_key(term.resume))
            stream = BinlogStream(
                term.server.source,
                self.server_id,
                term.resume.file,
                term.resume.offset,
                self._filter,
                heartbeat_s=self._server_heartbeat_s,
                tracker=term.tracker,
                online=term.online,
            )
            try:
                self._follow(term, stream, stop)
                return
            except SourceUnavailableError as exc:
                retries += 1
                # With replicas listed, a lost server ends the term soon, so the next one
                # starts on a server that answers.
                if retries > (2 if self.source.replicas else MAX_STREAM_RETRIES):
                    raise
                log.warning(
                    "%s; reconnecting from binlog %s (attempt %d)", exc, term.resume, retries
                )
                stop.wait(min(5.0, 0.1 * 2**retries))
            finally:
                stream.close()

    def _follow(self, term: _Term, stream: BinlogStream, stop: threading.Event) -> None:
        assembler = TransactionAssembler(
            term.resume.file, term.resume.offset, self._ddl_wanted, term.resume.upstream
        )
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
        inc = self._incremental(term)
        for event in stream.events():
            metrics.events += 1
            if leadership.lost:
                raise LeadershipLostError(f"{self.reader_id} lost leadership of {self.source.name}")
            now = wall()
            if now - xa_checked >= 1.0:
                # Once a second, not at every event (this loop runs for every event).
                xa_checked = now
                if assembler.prepared or metrics.xa_prepared:
                    xa_watch.check(assembler.held_xa(), now)
            idle = not batcher.batch.stats.events and now - term.last_publish >= hb_gap
            if isinstance(event, ServerHeartbeat):
                if _caught_up(assembler, event, inc) and idle:
                    self._commit(term, heartbeat=True, position=assembler.event_position)
                    continue
            else:
                if isinstance(event, Rows) and assembler.open_size >= fragment_rows:
                    # Before the next rows event, so fragments end at rows-event boundaries
                    # and the last part of the transaction is never empty.
                    self._fragment(term, assembler, now, inc)
                txn = assembler.feed(event)
                if txn is not None:
                    txn = _past_snapshot(term.snapshot, txn)
                    if txn.gtid:
                        term.gtid.add(txn.gtid)
                    inc.before(txn)
                    batcher.add(txn, now, self._definitions(term, txn.changes))
                    if len(batcher.batch.records) - batcher.batch.sent >= SEND_RECORDS:
                        self._send_ready(term)
                    term.resume = txn.end
                    inc.after(term.resume, assembler.in_transaction)
                    metrics.transactions += 1
                    last_commit_ms = txn.commit_time * 1000
                    metrics.lag_ms = max(0, int(now * 1000) - last_commit_ms)
                    idle = idle and not batcher.batch.stats.events
                    if idle and int(now * 1000) - last_commit_ms <= live_ms:
                        self._commit(term, heartbeat=True, position=txn.end, lag_ms=metrics.lag_ms)
                        continue
            if batcher.due(now):
                # Its end overlaps the reading of what follows (the caught-up, heartbeat and
                # stop paths wait for theirs).
                self._commit(term, heartbeat=False, wait=False)
            if stop.is_set() and not assembler.in_transaction:
                return

    def _fragment(
        self, term: _Term, assembler: TransactionAssembler, now: float, inc: Incremental
    ) -> None:
        inc.ahead(assembler.event_position)
        txn_id, gtid, changes = assembler.take_open()
        term.batcher.stream(txn_id, gtid, changes, now, self._definitions(term, changes))
        self.metrics.fragments += 1
        self._commit(term, heartbeat=False)

    def _definitions(self, term: _Term, changes: list[Change]) -> list[Definition]:
        """What creates each table `changes` deliver rows of that no definition was published
        for in this source's history (PROTOCOL.md §9.6): a table known neither from a DDL read
        nor from the table states stored with the checkpoint, nor snapshotted (a snapshot
        published its CREATE). The tracker's stored states say so after a restart: they are
        committed in the same Kafka transaction as the definition."""
        tracker = term.tracker
        assert tracker is not None
        if not tracker.undefined:
            return []
        out: list[Definition] = []
        snap = term.snapshot
        for item in changes:
            if not isinstance(item, RowItem):
                continue
            name = TableName(item.table.schema, item.table.table)
            if name not in tracker.undefined:
                continue
            tracker.undefined.discard(name)
            qualified = f"{name.schema}.{name.table}"
            if snap is not None and (
                qualified in snap.tables
                or (qualified in snap.backfills and snap.backfills[qualified].chunks > 0)
            ):
                continue
            statements = term.server.create_statements(name.schema, name.table)
            if not statements:
                log.warning(
                    "%s: %s met first at binlog %s is gone from the server: no definition "
                    "of it can be published; a consumer without it stops at its rows",
                    self.source.name,
                    qualified,
                    item.position,
                )
                continue
            log.info(
                "%s: %s met first at binlog %s: its definition is published before its rows",
                self.source.name,
                qualified,
                item.position,
            )
            out.append((item.table, statements))
        return out

    def _incremental(self, term: _Term) -> Incremental:
        """The term's incremental snapshots (signals followed with ``reader.signal_topic``);
        a new stream reads again from the checkpoint, so a chunk in flight is read again."""
        if term.incremental is None:
            topic = self.settings.signal_topic
            offset = 0 if term.snapshot is None else term.snapshot.signal_offset
            watch = (
                None
                if topic is None
                else SignalWatch(self.services.kafka, topic, self.source.name, offset)
            )

            def emit(
                table: TableSchema, rows: list[tuple[Value, ...]], txn: str, at: BinlogPosition
            ) -> None:
                state = self.snapshot = term.snapshot
                assert state is not None
                term.batcher.add_snapshot(table, rows, txn, state.seq, at, self._wall())
                state.seq += len(rows)

            def emit_ddl(
                table: TableSchema, statements: list[str], txn: str, at: BinlogPosition
            ) -> None:
                state = term.snapshot
                assert state is not None
                state.seq += term.batcher.add_snapshot_ddl(
                    table, statements, txn, state.seq, at, self._wall()
                )

            def emit_marker(
                table: TableSchema, snapshot: str, at: BinlogPosition, rows: int | None
            ) -> None:
                self._marker(term, table, snapshot, rows, at)

            term.incremental = Incremental(
                term.server.source,
                term.server.where,
                watch,
                self.settings.snapshot_chunk_rows,
                term,
                term.server.table_schema,
                self._filter.wanted,
                emit,
                emit_ddl=emit_ddl,
                emit_marker=emit_marker if self.settings.snapshot_markers else None,
                commit=lambda: self._commit(term, heartbeat=False),
            )
        term.incremental.rewind()
        return term.incremental

    def _ddl_wanted(self, schema: str, parsed: ParsedDdl) -> bool:
        if parsed.database is not None:
            return self._filter.schema_wanted(parsed.database)
        if not parsed.tables:
            return self._filter.schema_wanted(schema) if schema else False
        # RENAME across the filter's edge, DROP of several tables: wanted if any table is.
        return any(self._filter.wanted(t.schema, t.table) for t in parsed.touched)

    # ---- publishing -----------------------------------------------------------------------------

    def _table_states(self, term: _Term, topic: str, ts: int) -> list[OutRecord]:
        """The tracked table states as of the checkpoint (a new term restores them); a table
        not known is stored with no columns."""
        assert term.tracker is not None
        out: list[OutRecord] = []
        if term.online is not None:
            term.online.settled(_key(term.resume))
        for name, state in term.tracker.durable(_key(term.resume)):
            table = state or TableSchema(name.schema, name.table, (), ())
            value, headers = encode(SchemaRecord.of(table, self.source.name, ts), self._encoding)
            key = table_state_key(self.source.name, name.schema, name.table)
            out.append((topic, None, key, value, headers))
        return out

    def _send_ready(self, term: _Term) -> None:
        """Produce the open batch's final records now, into the Kafka transaction its commit
        ends (begun here if need be), so librdkafka sends them while the next transactions are
        read rather than all at the commit. Nothing is visible before that commit: exactly once
        holds as before; a failure aborts the transaction and ends the term, as at a commit."""
        batch = term.batcher.batch
        ready = term.batcher.ready()
        if ready - batch.sent < SEND_RECORDS:
            return
        if term.in_flight is not None:
            if term.in_flight[0].is_alive():
                return  # read on while the previous batch commits; these go out after it
            self._settle(term)
        _produce_in_transaction(term.publisher, batch.records[batch.sent : ready])
        batch.sent = ready

    def _commit(
        self,
        term: _Term,
        heartbeat: bool,
        position: BinlogPosition | None = None,
        lag_ms: int = 0,
        wait: bool = True,
    ) -> None:
        """One Kafka transaction: the open batch, a watermark to every partition, the checkpoint.

        With ``wait=False`` the transaction's end (waiting for the records' delivery, the
        checkpoint, the commit) runs on a thread of its own while the caller reads on: the
        next batch is built meanwhile but nothing of it is produced before that commit has
        returned (`_settle`), so the transactions stay in binlog order, and a failed commit
        ends the term as it does when waited for (the next term resumes from the last
        committed checkpoint, reading that batch and what followed again)."""
        self._settle(term)
        if self.leadership.lost:
            raise LeadershipLostError(f"{self.reader_id} lost leadership of {self.source.name}")
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
        _produce_in_transaction(term.publisher, records)
        ending = self._ending(term, batch, now, started)
        if wait:
            self._end(term, ending)
            return
        thread = threading.Thread(
            target=self._end_quietly, args=(term, ending), name="rowbus-commit", daemon=True
        )
        term.in_flight = (thread, ending)
        thread.start()

    def _ending(self, term: _Term, batch: Batch, now: float, started: float) -> _Ending:
        """What the transaction's end needs, taken from the term now: the reader goes on
        changing the term while a commit runs on its own thread."""
        batcher = term.batcher
        checkpoint = ReaderCheckpoint(
            source=self.source.name,
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
        return _Ending(
            batch,
            checkpoint,
            self._table_states(term, topic, checkpoint.ts),
            fragment,
            dict(term.offsets),
            now,
            started,
        )

    def _end(self, term: _Term, ending: _Ending) -> None:
        """Wait for the records, produce the checkpoint (with the offsets they reached) and
        commit; then the term and the metrics move on."""
        publisher = term.publisher
        try:
            offsets = ending.offsets
            offsets.update(publisher.flush())
            checkpoint = replace(
                ending.checkpoint,
                offsets=tuple((t, p, o) for (t, p), o in sorted(offsets.items())),
            )
            value, headers = encode(checkpoint, self._encoding)
            topic = self.settings.checkpoints_topic
            records: list[OutRecord] = [
                (topic, None, checkpoint_key(self.source.name), value, headers)
            ]
            records.extend(ending.tables)
            if ending.fragment is not None:
                fragment = replace(checkpoint, position=ending.fragment)
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

    def _end_quietly(self, term: _Term, ending: _Ending) -> None:
        """`_end` on the commit thread: its error waits for `_settle`."""
        try:
            self._end(term, ending)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader's thread
            ending.error = exc

    def _settle(self, term: _Term, quiet: bool = False) -> None:
        """Wait for the commit running on its own thread, if any; raise its error (unless
        `quiet`: the term is ending anyway)."""
        if term.in_flight is None:
            return
        thread, ending = term.in_flight
        thread.join()
        term.in_flight = None
        if ending.error is not None and not quiet:
            raise ending.error
