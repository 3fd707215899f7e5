"""Helpers of the snapshot tests: a source database with pre-existing W2 rows, a sink applier
for the Subscriber (snapshot rows are upserts), the reader's snapshot state from Kafka."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.spill import DataEvent
from rowbus.merge.transaction import Transaction
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import delete_statements, upsert_statements
from rowbus.workloads import W2, W2_DDL
from tests.conftest import connect


def fill(
    server: MySQLSettings,
    database: str,
    rows_per_table: int,
    seed: int = 7,
    binlog: bool = True,
) -> W2:
    """W2's 8 tables with `rows_per_table` rows each (bulk, through MariaDB's sequence
    engine), every key known to the returned workload so its writes touch them.
    `binlog=False`: the rows are not written to the binary log (rows older than the binlog
    window, as on a server whose logs were purged; and twice as fast to load)."""
    w2 = W2(database, seed=seed, initial_rows=8)
    with connect(server, database, autocommit=False) as conn:
        w2.create(conn)
        base = 1_000_000
        with conn.cursor() as cur:
            if not binlog:
                cur.execute("SET SESSION sql_log_bin = 0")
            for index, name in enumerate(w2.names()):
                lo = base + index * rows_per_table
                cur.execute(
                    f"INSERT INTO `{database}`.`{name}` SELECT seq, seq % 1000, "
                    "CONCAT('s', seq), (seq % 100000) / 100, "
                    "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq MICROSECOND "
                    f"FROM seq_{lo}_to_{lo + rows_per_table - 1}"
                )
                w2.keys[index].extend(range(lo, lo + rows_per_table))
                conn.commit()
            if not binlog:
                cur.execute("SET SESSION sql_log_bin = 1")
    return w2


def sink_tables(sink: MySQLSettings, database: str, w2: W2) -> None:
    with connect(sink, database) as conn, conn.cursor() as cur:
        for name in w2.names():
            cur.execute(W2_DDL.format(name=f"`{database}`.`{name}`"))


class Writer(threading.Thread):
    """W2 steps on the source until stopped (bounded: `limit` steps)."""

    def __init__(
        self, server: MySQLSettings, w2: W2, limit: int = 200_000, pause_s: float = 0.0
    ) -> None:
        super().__init__(name="w2-writer", daemon=True)
        self.server, self.w2, self.limit = server, w2, limit
        self.pause_s = pause_s
        """Between steps: fewer changes for the sink to apply after a long run."""
        self.stop = threading.Event()
        self.steps = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with connect(self.server, self.w2.schema, autocommit=False) as conn:
                while not self.stop.is_set() and self.steps < self.limit:
                    self.steps += self.w2.step(conn)
                    if self.pause_s:
                        self.stop.wait(self.pause_s)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> int:
        self.stop.set()
        self.join(60)
        assert not self.is_alive(), "the W2 writer did not stop"
        if self.error is not None:
            raise self.error
        return self.steps


class SinkApply:
    """Applies released transactions to the sink by primary key: READ / INSERT / UPDATE as
    upserts (REPLACE: a snapshot row may meet a row already there), DELETE by key. Counts the
    snapshot rows per key to prove none arrives twice."""

    def __init__(self, services: Settings, database: str, sub: Subscriber) -> None:
        self.conn = connect(services.resolved_sink, database, autocommit=False)
        self.database = database
        self.sub = sub
        self.read_keys: dict[tuple[str, Any], int] = {}
        self.rows = 0

    def __call__(self, events: Sequence[DataEvent]) -> None:
        with self.conn.cursor() as cur:
            for ev in events:
                if not isinstance(ev, RowChange):
                    continue
                table = self.sub.table(ev)
                name = f"`{self.database}`.`{ev.table}`"
                pk = table.primary_key
                if ev.op is Op.READ:
                    key = (ev.table, tuple(ev.image[i] for i in table.pk_indexes))
                    self.read_keys[key] = self.read_keys.get(key, 0) + 1
                if ev.before is not None and (
                    ev.after is None or _key(ev, table, ev.before) != _key(ev, table, ev.after)
                ):
                    where = " AND ".join(f"`{k}` = %s" for k in pk)
                    cur.execute(f"DELETE FROM {name} WHERE {where}", _key(ev, table, ev.before))
                if ev.after is not None:
                    cols = ", ".join(f"`{c}`" for c in table.column_names)
                    marks = ", ".join(["%s"] * len(table.column_names))
                    cur.execute(f"REPLACE INTO {name} ({cols}) VALUES ({marks})", ev.after)
                self.rows += 1
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()


def _key(ev: RowChange, table: Any, image: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(image[i] for i in table.pk_indexes)


def snapshot_state(records: Sequence[object], source: str) -> SnapshotState | None:
    """The snapshot state of the last checkpoint of `source` among `records`."""
    found = None
    for r in records:
        if isinstance(r, ReaderCheckpoint) and r.source == source:
            found = r
    if found is None or found.snapshot is None:
        return None
    return SnapshotState.from_json(found.snapshot)


class BulkApply:
    """Applies polled batches of released transactions to the sink in bulk, one sink
    transaction per batch: the batch collapsed to the last image of each key in commit order
    (DM's safe mode: every statement idempotent), deletions by key, then multi-row upserts
    (rendered by the Spark apply's own statement builders). Records each snapshot row's key to
    prove none arrives twice; W2 keys are single BIGINTs."""

    def __init__(self, sink: MySQLSettings, database: str) -> None:
        self.conn = connect(sink, database, autocommit=False)
        self.database = database
        self.read_keys: dict[str, set[Any]] = {}
        self.read_twice: list[tuple[str, Any]] = []
        self.rows = 0

    def __call__(self, sub: Subscriber, txns: Sequence[Transaction]) -> None:
        final: dict[str, dict[tuple[Any, ...], tuple[Any, ...] | None]] = {}
        shapes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for txn in txns:
            for ev in txn.events:
                if not isinstance(ev, RowChange):
                    continue
                table = sub.table(ev)
                shapes[ev.table] = (tuple(table.column_names), tuple(table.primary_key))
                keys = final.setdefault(ev.table, {})
                pk = table.pk_indexes
                if ev.op is Op.READ:
                    seen = self.read_keys.setdefault(ev.table, set())
                    key = ev.image[pk[0]] if len(pk) == 1 else tuple(ev.image[i] for i in pk)
                    if key in seen:
                        self.read_twice.append((ev.table, key))
                    seen.add(key)
                if ev.before is not None:
                    keys[tuple(ev.before[i] for i in pk)] = None
                if ev.after is not None:
                    keys[tuple(ev.after[i] for i in pk)] = ev.after
                self.rows += 1
        with self.conn.cursor() as cur:
            for name, keys in final.items():
                columns, key_columns = shapes[name]
                target = Target(self.database, name)
                gone = [k for k, image in keys.items() if image is None]
                for sql in delete_statements(target, key_columns, gone):
                    cur.execute(sql)
                images = [image for image in keys.values() if image is not None]
                for sql in upsert_statements(target, columns, key_columns, images):
                    cur.execute(sql)
        self.conn.commit()

    @property
    def read_rows(self) -> int:
        return sum(len(s) for s in self.read_keys.values()) + len(self.read_twice)

    def close(self) -> None:
        self.conn.close()
