"""The reference rebuild of the snapshot-marker tests (PROTOCOL.md §9.7): the Subscriber's
released transactions applied in order to a sink database, markers included, with the
statements of `rowbus.spark_apply.snapshots` (a keyed table's seen set is a sink table filled
in the rows' own sink transaction; a keyless table is emptied at the begin)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rowbus.config import MySQLSettings
from rowbus.consumers.stores.sql import SqlCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import RowChange, SnapshotBegin, SnapshotEnd
from rowbus.routing.routes import Target
from rowbus.spark_apply import snapshots
from tests.conftest import connect


class MarkedApply:
    """Applies released transactions to `database` (tables of the same names as upstream),
    one sink transaction per call (with a store, each transaction's checkpoint in it); rows by
    primary key (REPLACE / DELETE), keyless rows one by one by all their columns (§9.3)."""

    def __init__(
        self, sink: MySQLSettings, database: str, store: SqlCheckpointStore | None = None
    ) -> None:
        self.conn = connect(sink, database, autocommit=False)
        self.database = database
        self.store = store
        """Given: each transaction's checkpoint is saved in the sink transaction that applies
        it (exactly once), so a Subscriber restarted from `store` resumes after it."""
        self.markers: list[SnapshotBegin | SnapshotEnd] = []
        with self.conn.cursor() as cur:
            cur.execute(snapshots.running_sql([database]))
            self.running = {str(name) for _, name in cur.fetchall()}

    def __call__(self, sub: Subscriber, txns: Sequence[Transaction]) -> None:
        for txn in txns:
            marker = txn.marker
            if marker is not None:
                self._marker(marker)
            else:
                with self.conn.cursor() as cur:
                    for ev in txn.events:
                        if isinstance(ev, RowChange):
                            self._row(cur, sub, ev)
            if self.store is not None:
                self.store.save_in(self.conn, txn.checkpoint)
        self.conn.commit()

    def _keys(self, target: Target) -> tuple[bool, list[str]]:
        with self.conn.cursor() as cur:
            cur.execute(snapshots.key_sql(target))
            names = [r[0] for r in cur.fetchall()]
        return bool(names), [str(n) for n in names if n is not None]

    def _marker(self, marker: SnapshotBegin | SnapshotEnd) -> None:
        self.markers.append(marker)
        target = Target(self.database, marker.table)
        exists, keys = self._keys(target)
        with self.conn.cursor() as cur:
            if isinstance(marker, SnapshotBegin):
                if not exists:
                    return  # nothing there to replace
                if not keys:
                    cur.execute(snapshots.begin_keyless(target))
                    return
                self.conn.commit()  # the seen set's DDL commits implicitly
                for sql in snapshots.begin_ddl(target, keys):
                    cur.execute(sql)
                self.running.add(target.table)
                return
            if target.table not in self.running:
                return
            for sql in snapshots.end_statements(target, keys):
                cur.execute(sql)
            self.conn.commit()
            cur.execute(snapshots.end_ddl(target))
            self.running.discard(target.table)

    def _row(self, cur: Any, sub: Subscriber, ev: RowChange) -> None:
        table = sub.table(ev)
        name = f"`{self.database}`.`{ev.table}`"
        cols = table.column_names
        if not table.primary_key:
            if ev.before is not None:
                where = " AND ".join(f"`{c}` <=> %s" for c in cols)
                cur.execute(f"DELETE FROM {name} WHERE {where} LIMIT 1", ev.before)
            if ev.after is not None:
                marks = ", ".join(["%s"] * len(cols))
                cur.execute(f"INSERT INTO {name} VALUES ({marks})", ev.after)
            return
        pk = table.pk_indexes
        where = " AND ".join(f"`{table.primary_key[i]}` = %s" for i in range(len(pk)))
        if ev.before is not None:
            cur.execute(f"DELETE FROM {name} WHERE {where}", [ev.before[i] for i in pk])
        if ev.after is not None:
            marks = ", ".join(["%s"] * len(cols))
            cur.execute(f"REPLACE INTO {name} VALUES ({marks})", ev.after)
            if ev.table in self.running:
                key = [ev.after[i] for i in pk]
                target = Target(self.database, ev.table)
                for sql in snapshots.seen_statements(target, table.primary_key, [key]):
                    cur.execute(sql)

    def close(self) -> None:
        self.conn.close()
