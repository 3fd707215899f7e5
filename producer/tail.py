"""The reader's tail loop: the binlog from the term's resume position into batches, committed
as they come due.

`Tail.run` opens a `BinlogStream` at the term's last transaction end and reconnects (bounded) when
the server drops it; `Tail._follow` assembles whole transactions, publishes a table's definition
before its first rows where the stream has not defined it (PROTOCOL.md §9.6), fragments huge
transactions (§9.1), steps the incremental snapshots and commits a batch when it is due, or a
`Heartbeat` when idle and caught up. It returns when `stop` is set between transactions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rowbus.clients.election import Election
from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import (
    Change,
    RowItem,
    Rows,
    ServerHeartbeat,
    TransactionAssembler,
)
from rowbus.producer.batch import Definition
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.commits import CommitPipeline
from rowbus.producer.exceptions import LeadershipLostError, SourceUnavailableError
from rowbus.producer.metrics import ReaderMetrics
from rowbus.producer.settings import ReaderSettings
from rowbus.producer.snapshot.incremental import Incremental
from rowbus.producer.snapshotting import SnapshotDriver, past_snapshot
from rowbus.producer.tables import TableFilter
from rowbus.producer.term import Term, position_key
from rowbus.producer.xa_watch import PreparedXaWatch
from rowbus.protocol.ddl import ParsedDdl, TableName

log = logging.getLogger(__name__)

MAX_STREAM_RETRIES = 30


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


class Tail:
    """Tails a term's binlog into its batches, committing through `commits`."""

    def __init__(
        self,
        source: SourceConnection,
        settings: ReaderSettings,
        reader_id: str,
        server_id: int,
        table_filter: TableFilter,
        commits: CommitPipeline,
        snapshots: SnapshotDriver,
        leadership: Election,
        metrics: ReaderMetrics,
        wall: Callable[[], float],
    ) -> None:
        self.source = source
        self.settings = settings
        self.reader_id = reader_id
        self.server_id = server_id
        self._filter = table_filter
        self._commits = commits
        self._snapshots = snapshots
        self.leadership = leadership
        self.metrics = metrics
        self._wall = wall
        hb = settings.heartbeat_interval_s
        self._server_heartbeat_s = max(0.1, min(settings.flush_interval_s, hb / 4))

    def run(self, term: Term, stop: threading.Event) -> None:
        """Tail until `stop` (between transactions); reconnect a dropped stream a few times."""
        retries = 0
        tracker = term.tracker
        assert tracker is not None
        while not stop.is_set():
            # A new stream reads again from the last transaction end: what the tracker applied
            # after it is undone, so each DDL is applied once.
            tracker.rewind(position_key(term.resume))
            if term.online is not None:
                term.online.rewind(position_key(term.resume))
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

    def _follow(self, term: Term, stream: BinlogStream, stop: threading.Event) -> None:
        assembler = TransactionAssembler(
            term.resume.file, term.resume.offset, self._ddl_wanted, term.resume.upstream
        )
        batcher = term.batcher
        commits = self._commits
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
        inc = self._snapshots.incremental(term)
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
                    commits.commit(term, heartbeat=True, position=assembler.event_position)
                    continue
            else:
                if isinstance(event, Rows) and assembler.open_size >= fragment_rows:
                    # Before the next rows event, so fragments end at rows-event boundaries
                    # and the last part of the transaction is never empty.
                    self._fragment(term, assembler, now, inc)
                txn = assembler.feed(event)
                if txn is not None:
                    txn = past_snapshot(term.snapshot, txn)
                    if txn.gtid:
                        term.gtid.add(txn.gtid)
                    inc.before(txn)
                    batcher.add(txn, now, self._definitions(term, txn.changes))
                    commits.send_ready(term)
                    term.resume = txn.end
                    inc.after(term.resume, assembler.in_transaction)
                    metrics.transactions += 1
                    last_commit_ms = txn.commit_time * 1000
                    metrics.lag_ms = max(0, int(now * 1000) - last_commit_ms)
                    idle = idle and not batcher.batch.stats.events
                    if idle and int(now * 1000) - last_commit_ms <= live_ms:
                        commits.commit(
                            term, heartbeat=True, position=txn.end, lag_ms=metrics.lag_ms
                        )
                        continue
            if batcher.due(now):
                # Its end overlaps the reading of what follows (the caught-up, heartbeat and
                # stop paths wait for theirs).
                commits.commit(term, heartbeat=False, wait=False)
            if stop.is_set() and not assembler.in_transaction:
                return

    def _fragment(
        self, term: Term, assembler: TransactionAssembler, now: float, inc: Incremental
    ) -> None:
        inc.ahead(assembler.event_position)
        txn_id, gtid, changes = assembler.take_open()
        term.batcher.stream(txn_id, gtid, changes, now, self._definitions(term, changes))
        self.metrics.fragments += 1
        self._commits.commit(term, heartbeat=False)

    def _definitions(self, term: Term, changes: list[Change]) -> list[Definition]:
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
            statements = term.server.catalog.create_statements(name.schema, name.table)
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

    def _ddl_wanted(self, schema: str, parsed: ParsedDdl) -> bool:
        if parsed.database is not None:
            return self._filter.schema_wanted(parsed.database)
        if not parsed.tables:
            return self._filter.schema_wanted(schema) if schema else False
        # RENAME across the filter's edge, DROP of several tables: wanted if any table is.
        return any(self._filter.wanted(t.schema, t.table) for t in parsed.touched)
