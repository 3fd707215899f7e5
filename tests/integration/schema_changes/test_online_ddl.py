"""Online schema changes through a routed table and a shard group, while a writer runs: the real
pt-online-schema-change (Debian's percona-toolkit) and gh-ost's statement sequence (gh-ost has
no Debian package and does not support MariaDB: `ghost_alter` runs what it runs, see there).

A real reader → Kafka → Subscriber → `ShardedApply` (the shard-DDL coordinator, ZooKeeper-free
here) → the sink: ``items`` is routed to ``items_r`` (its DDL runs through the apply job's
`SinkDdl`), ``o_1`` and ``o_2`` merge into ``orders`` (their ALTER runs once, by the lock).
Each cut-over reaches the consumers as the tool's ALTER of the real table; at the end every
target equals its source row for row and column for column, and each shard lock ran once.
"""

from __future__ import annotations

import logging
import random
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.sharded_apply import ShardedApply
from rowbus.consumers.subscriber import Subscriber
from rowbus.local.install import ensure_command
from rowbus.merge.spill import DataEvent
from rowbus.producer.online_ddl import is_tool_table
from rowbus.protocol.ddl import DdlKind, parse_ddl
from rowbus.protocol.events import DdlChange, Op, RowChange
from rowbus.routing.routes import Router, RouteSettings
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockState
from rowbus.spark_apply.ddl import SinkDdl
from rowbus.testing import shard_routes
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.definitions import is_definition
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.shard_ddl.helpers import columns, coordinator, executor, readers_ready

TABLES = ("items", "o_1", "o_2")
WRITES = 100_000
"""The writer's bound (it stops long before, when told)."""
PACE_S = 0.01
"""The writer's pause between transactions: a steady load, not a flood (≤ 100/s)."""


class Writer:
    """Inserts, updates and deletes in every table until stopped, filling the columns each
    table has so far (`columns`, grown by the test once a cut-over is done)."""

    def __init__(self, server: MySQLSettings, db: str) -> None:
        self.server, self.db = server, db
        self.columns = {t: ["v"] for t in TABLES}
        self.ids: dict[str, list[int]] = {t: [] for t in TABLES}
        self.touched: dict[str, list[int]] = {t: [] for t in TABLES}
        """Keys changed, in commit order (what gh-ost reads from the binlog to replay)."""
        self.done = 0
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        rnd = random.Random(7)
        try:
            with connect(self.server, self.db, autocommit=False) as conn, conn.cursor() as cur:
                for n in range(WRITES):
                    if self._stop.wait(PACE_S):
                        return
                    # Some transactions span two tables (pt-osc's trigger rows then sit in them).
                    keys = [
                        (table, self._change(cur, table, n, rnd))
                        for table in rnd.sample(TABLES, rnd.choice((1, 2)))
                    ]
                    conn.commit()
                    for table, key in keys:
                        self.touched[table].append(key)
                    self.done += 1
        except BaseException as exc:
            self._errors.append(exc)

    def _change(self, cur: Any, table: str, n: int, rnd: random.Random) -> int:
        ids = self.ids[table]
        cols = list(self.columns[table])
        values = [n + i for i in range(len(cols))]
        roll = rnd.random()
        if roll < 0.6 or len(ids) < 10:
            key = TABLES.index(table) * 1_000_000 + n
            names = ", ".join(["id", *cols])
            cur.execute(
                f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * (len(cols) + 1))})",
                (key, *values),
            )
            ids.append(key)
            return key
        if roll < 0.85:
            key = rnd.choice(ids)
            sets = ", ".join(f"{c} = %s" for c in cols)
            cur.execute(f"UPDATE {table} SET {sets} WHERE id = %s", (*values, key))
            return key
        key = ids.pop(rnd.randrange(len(ids)))
        cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
        return key

    def start(self) -> Writer:
        self._thread.start()
        return self

    def wait(self, writes: int) -> None:
        start = self.done
        try:
            wait_for(
                lambda: self.done >= start + writes or bool(self._errors),
                timeout=60,
                what=f"{writes} more writes",
            )
        except Exception:
            with connect(self.server) as conn, conn.cursor() as cur:
                cur.execute("SHOW FULL PROCESSLIST")
                print("PROCESSLIST", cur.fetchall())
            raise
        self.check()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the writer did not stop"
        self.check()

    def check(self) -> None:
        if self._errors:
            raise self._errors[0]


def pt_osc(server: MySQLSettings, db: str, table: str, alter: str) -> None:
    """The real pt-online-schema-change: triggers, chunked copy, atomic RENAME swap."""
    tool = ensure_command("pt-online-schema-change", "percona-toolkit")
    password = server.password.get_secret_value()
    dsn = f"h={server.host},P={server.port},u={server.user},D={db},t={table}" + (
        f",p={password}" if password else ""
    )
    proc = subprocess.run(
        [
            tool,
            "--alter",
            alter,
            "--execute",
            "--recursion-method=none",
            "--no-check-alter",
            "--chunk-size=50",
            "--max-load=Threads_running=1000",
            "--critical-load=Threads_running=2000",
            "--set-vars=lock_wait_timeout=20",
            dsn,
        ],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Successfully altered" in proc.stdout, proc.stdout[-2000:]


def ghost_alter(
    server: MySQLSettings,
    db: str,
    table: str,
    alter: str,
    writer: Writer,
    chunk: int = 200,
    before_cut_over: Callable[[], None] = lambda: None,
) -> None:
    """gh-ost's statements (go/logic/applier.go), in its order: changelog table, ghost table
    created LIKE the original and altered, changelog rows, the row copy in chunks (INSERT IGNORE
    … SELECT … LOCK IN SHARE MODE) interleaved with the changes made meanwhile, then the atomic
    cut-over: the table locked, the RENAME issued from a second session (it waits), UNLOCK
    TABLES (the RENAME runs before the writes waiting, a metadata-lock request for RENAME
    taking precedence over theirs).

    One deviation: gh-ost also locks a sentry table ``_T_del`` (dropped just before the
    unlock) and writes the ghost while the table is WRITE-locked. MariaDB takes a RENAME's
    metadata locks in name order, and ``_T_…`` sorts before ``T``: the RENAME then waits on
    the sentry and queues on ``T`` only after the unlock, behind the writes waiting there,
    which go to the old table and are lost with it (seen here: one row per cut-over). So the
    sentry is created and dropped before the lock, the table is READ-locked (writes wait,
    the ghost is written from a third session) and the RENAME queues on ``T`` itself.

    gh-ost replays the changes from the binlog's row images; here the rows the writer changed
    are read back from the table (DELETE then INSERT … SELECT of each), and, while the table is
    locked, the ghost is made equal to it (the writer records a change after its commit, so
    the last ones may not be listed yet): at the swap the ghost equals the table, as with
    gh-ost. Both write only the ghost."""
    gho, ghc, dele = f"_{table}_gho", f"_{table}_ghc", f"_{table}_del"
    cols = ", ".join(["id", *writer.columns[table]])
    touched = writer.touched[table]
    touched.clear()

    def catch_up(cur: Any) -> None:
        """The changes committed since the last call, replayed one row at a time."""
        count = len(touched)
        keys = list(dict.fromkeys(touched[:count]))
        del touched[:count]
        for key in keys:
            cur.execute(f"DELETE FROM `{gho}` WHERE id = %s", (key,))
            cur.execute(
                f"INSERT INTO `{gho}` ({cols}) SELECT {cols} FROM `{table}` WHERE id = %s", (key,)
            )

    def reconcile(cur: Any) -> None:
        """Under the lock: the ghost made equal to the table, whatever the replay missed."""
        cur.execute(f"DELETE FROM `{gho}` WHERE id NOT IN (SELECT id FROM `{table}`)")
        cur.execute(f"REPLACE INTO `{gho}` ({cols}) SELECT {cols} FROM `{table}`")

    with connect(server, db) as a, a.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{db}`.`{ghc}`")
        cur.execute(
            f"create /* gh-ost */ table `{db}`.`{ghc}` (id bigint auto_increment, last_update "
            "timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint "
            "varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, "
            "primary key(id), unique key hint_uidx(hint)) auto_increment=256"
        )
        cur.execute(f"create /* gh-ost */ table `{db}`.`{gho}` like `{db}`.`{table}`")
        cur.execute(f"alter /* gh-ost */ table `{db}`.`{gho}` {alter}")
        cur.execute(
            f"insert /* gh-ost */ into `{db}`.`{ghc}` (id, hint, value) values (NULLIF(2, 0), "
            "'state', 'GhostTableMigrated') on duplicate key update last_update=NOW(), "
            "value=VALUES(value)"
        )
        cur.execute(f"SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM `{table}`")
        low, high = cur.fetchone()
        for first in range(low, high + 1, chunk):
            cur.execute(
                f"insert /* gh-ost */ ignore into `{db}`.`{gho}` ({cols}) (select {cols} from "
                f"`{db}`.`{table}` force index (`PRIMARY`) where id between %s and %s "
                "lock in share mode)",
                (first, first + chunk - 1),
            )
            catch_up(cur)
        writer.wait(20)
        before_cut_over()
        # gh-ost's sentry (created, then dropped just before the lock goes); see the docstring
        cur.execute(
            f"create /* gh-ost */ table `{db}`.`{dele}` (id int auto_increment primary key) "
            "engine=InnoDB comment='ghost-cut-over-sentry'"
        )
        cur.execute(f"drop /* gh-ost */ table if exists `{db}`.`{dele}`")
        cur.execute(f"lock /* gh-ost */ tables `{db}`.`{table}` read")
        with connect(server, db) as c, c.cursor() as ccur:
            catch_up(ccur)
            reconcile(ccur)
        errors: list[BaseException] = []

        def swap() -> None:
            try:
                with connect(server, db) as b, b.cursor() as bcur:
                    bcur.execute(
                        f"rename /* gh-ost */ table `{db}`.`{table}` to `{db}`.`{dele}`, "
                        f"`{db}`.`{gho}` to `{db}`.`{table}`"
                    )
            except BaseException as exc:
                errors.append(exc)

        renamer = threading.Thread(target=swap, name="gh-ost-rename")
        renamer.start()

        def rename_waits() -> bool:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s "
                "AND STATE = 'Waiting for table metadata lock'",
                ("rename /* gh-ost */%",),
            )
            return bool(cur.fetchone()[0])

        # As gh-ost: the RENAME must be queued on the lock before the lock goes, so it takes the
        # table before the writes waiting with it (a metadata lock request for RENAME goes first).
        wait_for(rename_waits, timeout=30, what="gh-ost's RENAME to wait on the lock")
        cur.execute("unlock tables")
        renamer.join(30)
        assert not renamer.is_alive() and not errors, errors
        cur.execute(f"drop /* gh-ost */ table if exists `{db}`.`{ghc}`")
        cur.execute(f"drop /* gh-ost */ table if exists `{db}`.`{dele}`")  # --ok-to-drop-table


def schema_of(server: MySQLSettings, db: str, table: str) -> list[tuple[str, str]]:
    return columns(server, db, table)


def test_gh_ost_and_pt_osc_cut_overs_on_routed_and_sharded_tables_change_the_schema_once(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rowbus.producer.online_ddl")
    server, sink = services.sources[0], services.resolved_sink
    db, target_db = make_database(server), make_database(sink)
    with connect(server, db) as conn, conn.cursor() as cur:
        for table in TABLES:
            cur.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v INT)")
    with connect(sink, target_db) as conn, conn.cursor() as cur:
        for table in ("items_r", "orders"):
            cur.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v INT)")
    topic = make_topic("osc", 3)
    schemas = make_topic("schemas", 1, **{"cleanup.policy": "compact"})
    ckpts = make_topic("ckpt", 1, **{"cleanup.policy": "compact"})
    routes = [
        RouteSettings(match=f"{db}.items", target=f"{target_db}.items_r"),
        RouteSettings(match=f"{db}.o_*", target=f"{target_db}.orders", sharded=True),
    ]
    router = Router(routes, "skip")
    groups = ShardGroups.build(
        shard_routes([(f"{db}.o_*", f"{target_db}.orders")]),
        [(topic, db, "o_1"), (topic, db, "o_2")],
    )
    ddl_state = unique("rowbus_ddl")
    sink_ddl = SinkDdl(router, lambda: connect(sink), ddl_state, "osc")
    applied: list[str] = []
    seen: list[Any] = []
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,
        database=db,
        data_topic=topic,
        checkpoints_topic=ckpts,
        schemas_topic=schemas,
    )
    with ExitStack() as stack:
        reader = ExitStack()
        stack.enter_context(reader)
        reader.enter_context(reader_thread(setup, heartbeat_interval_s=0.2))
        readers_ready(services, [topic])
        sub = Subscriber(
            services.kafka.client_config(),
            [topic],
            sources=[topic],
            topic_template="{source}",
            checkpoints_topic=ckpts,
            schemas_topic=schemas,
            group_id=unique("sub"),
        )
        sub.start()
        stack.callback(sub.close)
        coord = coordinator(
            services, make_topic("control", 1), "osc", groups, execute=executor(services, ddl_state)
        )
        stack.callback(coord.close)
        target_conn = connect(sink)
        stack.callback(target_conn.close)

        def apply(events: Sequence[DataEvent]) -> None:
            with target_conn.cursor() as cur:
                for ev in events:
                    if is_definition(ev):
                        continue
                    if isinstance(ev, DdlChange):
                        applied.append(ev.statement)
                        sink_ddl.apply(ev)
                        continue
                    assert isinstance(ev, RowChange), ev
                    table = sub.table(ev)
                    seen.append((table.table, ev.op.name, ev.image, ev.after, str(ev.position)))
                    found = router.target(table.schema, table.table, ev.source)
                    if found is None:
                        continue
                    if ev.op is Op.DELETE:
                        cur.execute(f"DELETE FROM {found.quoted} WHERE id=%s", (ev.image[0],))
                        continue
                    names = ", ".join(f"`{c}`" for c in table.column_names)
                    marks = ", ".join(["%s"] * len(table.column_names))
                    cur.execute(f"REPLACE INTO {found.quoted} ({names}) VALUES ({marks})", ev.after)

        sharded = ShardedApply(coord, apply)

        def step() -> None:
            for txn in sub.poll(0.2):
                sharded.handle(txn)
            sharded.poll()

        writer = Writer(server, db).start()
        stack.callback(writer.stop)
        writer.wait(100)
        started = time.monotonic()
        for table in TABLES:
            pt_osc(server, db, table, "ADD COLUMN a INT NULL")
            writer.columns[table].append("a")
            step()
        pt_s = time.monotonic() - started
        writer.wait(50)

        def restart() -> None:
            """A reader restart between gh-ost's ALTER and its cut-over: the new term resumes
            from a checkpoint past the ALTER, and reads it back from the binlog."""
            reader.close()
            reader.enter_context(reader_thread(setup, heartbeat_interval_s=0.2))

        started = time.monotonic()
        for table in TABLES:
            ghost_alter(
                server,
                db,
                table,
                "ADD COLUMN b BIGINT NULL, ADD KEY kb (b)",
                writer,
                before_cut_over=restart if table == "items" else lambda: None,
            )
            writer.columns[table].append("b")
            step()
        ghost_s = time.monotonic() - started
        writer.wait(50)
        writer.stop()
        last: list[Any] = []

        def equal() -> bool:
            step()
            diffs = verify(services, routes, [db])
            last[:] = [diffs, sharded.held()]
            return len(diffs) == 2 and all(d.equal for d in diffs)

        try:
            wait_for(equal, timeout=90, what="the targets to equal their sources")
        except Exception:
            print("DIAG", last, applied)
            keys = {k[0] for d in last[0] for k in (*d.missing, *d.extra, *d.different)}
            for key in keys:
                print("KEY", key, [e for e in seen if e[2] and e[2][0] == key])
            raise
        print(f"pt-osc x3 {pt_s:.1f}s, gh-ost sequence x3 {ghost_s:.1f}s, {writer.done} writes")
        assert f"{db}._items_gho were made before this reader started" in caplog.text
        for lock in (f"{target_db}.orders#1", f"{target_db}.orders#2"):
            found: Any = coord.table.get(lock)
            assert found is not None and found.state is LockState.DONE, (lock, found)
            assert len(found.executed) == 1, found
    # column for column: each tool's change reached each target once
    expected = [("id", "bigint(20)"), ("v", "int(11)"), ("a", "int(11)"), ("b", "bigint(20)")]
    for table in TABLES:
        assert schema_of(server, db, table) == expected
    assert schema_of(sink, target_db, "items_r") == expected
    assert schema_of(sink, target_db, "orders") == expected
    # the routed table's two changes arrived as ALTERs of items, no RENAME nor any tool table's
    # DDL (pt-osc's triggers pass as statements a sink does not run)
    tables = [parse_ddl(s, db) for s in applied]
    assert not any(is_tool_table(t.table) for p in tables for t in p.tables), applied
    assert [s for s, p in zip(applied, tables, strict=True) if p.kind is not DdlKind.OTHER] == [
        f"ALTER TABLE `{db}`.`items` ADD COLUMN a INT NULL",
        f"ALTER TABLE `{db}`.`items` ADD COLUMN b BIGINT NULL, ADD KEY kb (b)",
    ], applied
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert sorted(r[0] for r in cur.fetchall()) == sorted(TABLES)
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{ddl_state}`")
