"""A leadership term of the reader: what it starts from, and how it is opened.

`Term` is the state one term carries (the server and producer it uses, the batcher, the resume
position, the snapshot it reads). `TermOpener` builds one: before the election (`prepare`: the
source checked, the Kafka clients and system topics made, nothing that fences the leader, so a
takeover is quick), and once elected (`open`: the last checkpoint loaded, the point to resume
at on this server, a snapshot begun, continued or skipped as ``reader.snapshot`` says).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import DdlItem
from rowbus.producer.batch import Batcher, FlushPolicy
from rowbus.producer.checkpoints import load_checkpoints, load_writer
from rowbus.producer.debezium import DebeziumRecords
from rowbus.producer.exceptions import (
    PositionPurgedError,
    ServerMisconfiguredError,
    SourceUnavailableError,
    UnsafeSettingError,
)
from rowbus.producer.history import BinlogResetError, check_history
from rowbus.producer.online_ddl import OnlineDdl, binlog_history
from rowbus.producer.publisher import KafkaPublisher
from rowbus.producer.records import NativeRecords, Records, Topics
from rowbus.producer.server import SourceServer
from rowbus.producer.settings import ReaderSettings, Services, snapshot_mode
from rowbus.producer.snapshot.incremental import Incremental
from rowbus.producer.snapshot.initial import Prepared, prepare
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.producer.start import GtidState, parse_start
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import PositionKey, SchemaTracker
from rowbus.protocol.codec import Encoding
from rowbus.protocol.ddl import TableName
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint, TableSchema
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import Dispatch, DispatchRule, Partitioner
from rowbus.protocol.topics import (
    CHECKPOINTS_TOPIC_CONFIG,
    CHECKPOINTS_TOPIC_PARTITIONS,
    DATA_TOPIC_CONFIG,
    SCHEMAS_TOPIC_CONFIG,
    SCHEMAS_TOPIC_PARTITIONS,
    WRITERS_TOPIC_CONFIG,
    data_topic,
    per_table,
    writers_topic,
)

if TYPE_CHECKING:
    from rowbus.producer.commits import Ending

log = logging.getLogger(__name__)


def position_key(position: BinlogPosition) -> PositionKey:
    """The tracker's key of a binlog position."""
    return (position.file_number, position.file, position.offset)


@dataclass
class Term:
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
    in_flight: tuple[threading.Thread, Ending] | None = None
    """The commit running on its own thread (`CommitPipeline.commit` with ``wait=False``)."""

    def __post_init__(self) -> None:
        if self.tracker is None:
            server = self.server
            self.tracker = SchemaTracker(
                server.catalog.table_extras,
                server.catalog.charsets,
                server.catalog.database_collation,
            )

    def restore_tables(self, tables: Mapping[TableName, TableSchema | None]) -> None:
        """The table states stored with the checkpoint this term resumes from."""
        assert self.tracker is not None
        self.tracker.restore(tables)


def _schemas_only(batcher: Batcher, prepared: Prepared) -> None:
    """schema_only: every table's schema, published with the first commit; no rows."""
    for table in prepared.schemas.values():
        batcher.add_schema(table)
    prepared.close()


class TermOpener:
    """Opens the reader's terms on one source: `prepare` before each election, `open` once
    elected. Remembers the server read last, so the next term starts on it if it answers."""

    def __init__(
        self,
        source: SourceConnection,
        settings: ReaderSettings,
        services: Services,
        reader_id: str,
        server_id: int,
        transactional_id: str,
        table_filter: TableFilter,
        encoding: Encoding,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.settings = settings
        self.services = services
        self.reader_id = reader_id
        self.server_id = server_id
        self.transactional_id = transactional_id
        self._filter = table_filter
        self._encoding = encoding
        self._wall = wall
        self._rules = {
            pattern: Dispatch(DispatchRule(d.rule), tuple(d.columns))
            for pattern, d in settings.dispatch.items()
        }
        self._cascades_told = False
        self._serving = 0
        """Index in `source.servers()` of the server read last."""

    def prepare(self) -> tuple[SourceServer, KafkaPublisher]:
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
            publisher.partitions(
                writers_topic(s.checkpoints_topic),
                CHECKPOINTS_TOPIC_PARTITIONS,
                WRITERS_TOPIC_CONFIG,
            )
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

    def open(self, server: SourceServer, publisher: KafkaPublisher) -> Term:
        """The elected reader's term: fence older producers, load the last checkpoint and
        decide where to resume and what to snapshot."""
        s = self.settings
        publisher.start()
        # Before the checkpoint is read: the last term's open transaction is aborted by this
        # fencing (its writer's, not the stable id's), so every record below is final.
        writers = writers_topic(s.checkpoints_topic)
        publisher.rotate(writers, load_writer(self.services.kafka, writers, publisher.fence_id))
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
                before, state, fragment = state, None, None
                # After a reset the new files start again at 1: the next upstream epoch keeps
                # order keys growing (PROTOCOL.md §9.4).
                prepared = self._new_snapshot(
                    server, checkpoint.position.upstream + isinstance(exc, BinlogResetError)
                )
                if s.snapshot_markers:
                    prepared.gone = self._gone(prepared, before, stored.tables)
                resume = prepared.state.position
                gtid = GtidState(resume.gtid)
            if state is not None:
                prepared = self._continue_snapshot(server, state, resume, mode)
        else:
            prepared, resume, gtid = self._first_start(server, mode)
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
        term = Term(
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

    def _first_start(
        self, server: SourceServer, mode: str
    ) -> tuple[Prepared | None, BinlogPosition, GtidState]:
        """Where a source never read before starts: its new snapshot's position, or
        ``reader.start`` when it is not snapshotted."""
        if mode != "never":
            prepared = self._new_snapshot(server)
            if mode == "schema_only":
                prepared.state.done = True  # schemas only: published by `open`, then stream
            resume = prepared.state.position
            return prepared, resume, GtidState(resume.gtid)
        start = parse_start(self.settings.start, self.source.name)
        resume = server.locator.locate(start, self.server_id)
        return None, resume, GtidState(resume.gtid or server.gtid_at(resume.file, resume.offset))

    def _batcher(
        self, server: SourceServer, publisher: KafkaPublisher, clock: HybridClock
    ) -> Batcher:
        s = self.settings
        topics = Topics(
            self.source.name,
            s.topic_template,
            lambda topic: publisher.partitions(
                topic, s.partitions, DATA_TOPIC_CONFIG, "reader.partitions"
            ),
            lambda n: Partitioner(n, self._rules),
        )
        records: Records
        if s.encoding != "debezium":
            records = NativeRecords(topics, s.schemas_topic, self._encoding)
        else:
            d = s.debezium
            options = DebeziumOptions(
                d.topic_prefix or self.source.name, d.schemas, d.transaction_metadata
            )
            row = server.query_one("SELECT @@server_id")
            records = DebeziumRecords(
                topics,
                s.schemas_topic,
                DebeziumRenderer(options, int(row[0]) if row else 0),
                debezium_topics=d.topics == "debezium",
                wall=self._wall,
            )
        return Batcher(
            self.source.name,
            clock,
            records,
            lambda item: _ddl_schema(server, item),
            FlushPolicy(s.flush_rows, s.flush_bytes, s.flush_interval_s, s.heartbeat_interval_s),
        )

    def _continue_snapshot(
        self, server: SourceServer, state: SnapshotState, resume: BinlogPosition, mode: str
    ) -> Prepared | None:
        """The rest of an interrupted snapshot; or, after a finished one, the tables added to
        the configuration since (snapshotted alone, the others not); or nothing."""
        if not state.done:
            self._refuse_unmarked_restart(state)
            return self._prepare_snapshot(server, state, upstream=resume.upstream)
        if mode != "never":
            return self._prepare_snapshot(
                server, state, stream_from=resume, upstream=resume.upstream
            )
        return None

    def _gone(
        self,
        prepared: Prepared,
        before: SnapshotState | None,
        tables: Mapping[TableName, TableSchema | None],
    ) -> list[TableSchema]:
        """The tables consumers may hold from before a lost history that the new snapshot
        does not find (dropped meanwhile): those the previous snapshot read and those the
        stream's table states know, that the filter still wants. A table a consumer does not
        hold costs it nothing (PROTOCOL.md §9.7)."""
        names = {(t.schema, t.table) for t in tables}
        if before is not None:
            for name in before.tables:
                schema, _, table = name.partition(".")
                names.add((schema, table))
        gone = [
            TableSchema(schema, table, (), ())
            for schema, table in sorted(names)
            if f"{schema}.{table}" not in prepared.schemas and self._filter.wanted(schema, table)
        ]
        for t in gone:
            log.warning(
                "%s: %s is gone since the lost history; its snapshot of no rows empties it "
                "in consumers",
                self.source.name,
                t.qualified,
            )
        return gone

    def _refuse_unmarked_restart(self, state: SnapshotState) -> None:
        """A keyless table half published with markers is read again from its start; only a
        new `snapshot_begin` makes consumers drop the rows already published (PROTOCOL.md
        §9.7). With markers now off its rows would be doubled downstream: refuse."""
        if self.settings.snapshot_markers:
            return
        half = state.half_published_keyless()
        if half:
            raise UnsafeSettingError(
                f"reader.snapshot_markers is false, but source {self.source.name}'s snapshot "
                f"of keyless table {', '.join(t.name for t in half)} was published in part "
                "with markers: read again without a snapshot_begin its rows would be doubled "
                "in consumers; set reader.snapshot_markers: true until the snapshot is done"
            )

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
        for child, parent, rule in server.catalog.cascading_foreign_keys():
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
            found = server.locator.locate(spec, self.server_id)
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


def _ddl_schema(server: SourceServer, item: DdlItem) -> TableSchema | None:
    """The table a DDL leaves, as the server shows it now (None when it drops it)."""
    target = item.parsed.table
    if target is None or item.parsed.kind.value.startswith("drop"):
        return None
    return server.catalog.table_schema(target.schema, target.table)
