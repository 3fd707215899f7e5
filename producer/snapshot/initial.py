"""Starting or resuming a snapshot, and keeping streamed changes that a snapshot row already
shows out of the stream (`unshown`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import Change, RowItem, Transaction
from rowbus.producer.server import SourceServer
from rowbus.producer.snapshot.source import ReadView, list_tables, open_views
from rowbus.producer.snapshot.state import SnapshotState, TableProgress, has_integer_key
from rowbus.producer.tables import TableFilter
from rowbus.protocol.events import BinlogPosition, Op, TableSchema

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """A snapshot ready to read: its state, open read views, the schemas of pending tables."""

    state: SnapshotState
    views: list[ReadView]
    schemas: dict[str, TableSchema]
    gone: list[TableSchema] = field(default_factory=list)
    """A reset snapshot's tables the stream had before and the read view does not find: each
    gets a snapshot of no rows, so consumers hold none of it (PROTOCOL.md §9.7)."""

    def close(self) -> None:
        for v in self.views:
            v.close()
        self.views = []


def prepare(
    server: SourceServer,
    source: SourceConnection,
    table_filter: TableFilter,
    parallelism: int,
    state: SnapshotState | None,
    stream_from: BinlogPosition | None = None,
    upstream: int = 0,
) -> Prepared | None:
    """Open read views; a new `state` at their position (None given), or `state` resumed there.
    A table without a primary key is read in chunks cut from one scan
    (`source.ReadView.keyless_chunks`); resumed, it is read again from its start under a new
    snapshot id (PROTOCOL.md §9.3, §9.7).

    `stream_from` (a finished `state`, the checkpoint's position): snapshot only the tables the
    filter now wants that the state does not know (added to the configuration), at a read view
    after `stream_from`, while the stream goes on from there; None when there are none.
    `upstream`: the stream's upstream count (PROTOCOL.md §9.4), which the read view's position
    takes so positions compare in binlog order."""
    if stream_from is not None and state is not None and not state.tables:
        return None  # the state of incremental snapshots only: this reader never snapshotted
    views = open_views(source, parallelism, server.where)
    try:
        position = replace(views[0].position, upstream=upstream)
        listed = list_tables(views[0], table_filter)
        schemas: dict[str, TableSchema] = {}
        estimates: dict[str, int] = {}
        for schema, table, estimate in listed:
            found = server.catalog.table_schema(schema, table)
            if found is None:
                continue
            schemas[found.qualified] = found
            estimates[found.qualified] = estimate
        if stream_from is not None:
            assert state is not None
            new = [n for n in schemas if n not in state.tables]
            if not new:
                for v in views:
                    v.close()
                return None
            state.position = stream_from  # the new rows sit where the stream goes on (§9.5)
            state.done, state.finished = False, None
            for name in new:
                state.tables[name] = TableProgress(
                    name=name,
                    estimate=estimates.get(name, 0),
                    integer_key=has_integer_key(schemas[name]),
                    keyless=not schemas[name].primary_key,
                )
            state.resume_at(position)
            log.info(
                "snapshot of %s: %d table(s) new to the configuration (%s) at binlog %s",
                server.where,
                len(new),
                ", ".join(new),
                position,
            )
            return Prepared(state, views, schemas)
        if state is None:
            state = SnapshotState.start(position, list(schemas.values()), estimates)
            log.info(
                "snapshot of %s: %d tables at binlog %s",
                server.where,
                len(schemas),
                position,
            )
        else:
            for name, t in state.tables.items():
                if not t.done and name not in schemas:
                    log.warning("snapshot: %s is gone; nothing more to read of it", name)
                    t.done = True
            for name in schemas.keys() - state.tables.keys():
                # New to the filter since the snapshot began: read it whole at this position.
                state.tables[name] = TableProgress(
                    name=name,
                    estimate=estimates[name],
                    integer_key=has_integer_key(schemas[name]),
                    keyless=not schemas[name].primary_key,
                )
            state.resume_at(position)
            log.info(
                "snapshot of %s resumed (%d tables left) with a read view at binlog %s",
                server.where,
                len(state.pending()),
                position,
            )
        return Prepared(state, views, schemas)
    except BaseException:
        for v in views:
            v.close()
        raise


def unshown(state: SnapshotState, txn: Transaction) -> Transaction:
    """`txn` without the row changes that the snapshot rows already show (read views opened
    after them, on a resumed snapshot); a key-changing update may keep one half."""
    kept: list[Change] = []
    changed = False
    for item in txn.changes:
        if not isinstance(item, RowItem) or not state.filtering(item.position):
            kept.append(item)
            continue
        # A keyless table is one segment read from its start at one view: its key is the empty
        # tuple, so every change before that view is shown by it (rows identified by all
        # columns, PROTOCOL.md §9.3, cannot be told apart any finer).
        pk = item.table.pk_indexes
        bk = None if item.before is None else tuple(item.before[i] for i in pk)
        ak = None if item.after is None else tuple(item.after[i] for i in pk)
        op = state.keep(item.table.qualified, item.op, bk, ak, item.position)
        if op is item.op:
            kept.append(item)
            continue
        changed = True
        if op is Op.DELETE:
            kept.append(replace(item, op=op, after=None))
        elif op is Op.INSERT:
            kept.append(replace(item, op=op, before=None))
    return replace(txn, changes=kept) if changed else txn
