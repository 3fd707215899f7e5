"""A coordinated shard DDL runs downstream under the source session's sql_mode and at its time
(PROTOCOL.md §1.3), as a replica runs it, on both paths through the control topic: the
Subscriber's (`ShardedApply`) and the Spark job's hook (`ShardDdlHook`, driven here without
Spark: the DDL events the reader published go through its gate and its `after_apply` as the
planner calls them).

Two shards on a real source run the same DDL from a session that changes what it does to the
rows already there: a lenient ``sql_mode`` truncating a column (a strict sink refuses it), a
fixed session time with a ``DEFAULT CURRENT_TIMESTAMP`` column (the sink would fill its own
moment), or a session time zone with a DATETIME column (the sink would fill its own zone's). `rowbus verify` then compares the target with the union of the shards.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.consumers.sharded_apply import ShardedApply
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.protocol.events import DdlChange
from rowbus.routing.routes import RouteSettings
from rowbus.shard_ddl.ddl import coordinated
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockState
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.spark_apply.shard_ddl import ShardDdlHook
from rowbus.testing import shard_routes
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.shard_ddl.helpers import SinkApply, coordinator, executor, readers_ready

SHARDS = ("o_1", "o_2")
TABLE = "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v VARCHAR(10))"
SESSIONS = {
    # '' lets MODIFY cut 'abcdefgh' to 'abc'; the sink's STRICT_TRANS_TABLES refuses it
    "lenient": ("SET SESSION sql_mode = ''", "ALTER TABLE {t} MODIFY v VARCHAR(3)"),
    # the rows already there take the session's moment, not the sink's
    "timestamp": (
        "SET TIMESTAMP = 1700000000.123456",
        "ALTER TABLE {t} ADD COLUMN c DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
    ),
    # ... in the session's zone (protocol 1.5), not the sink connection's
    "zone": (
        "SET SESSION time_zone = '+05:30', TIMESTAMP = 1700000000",
        "ALTER TABLE {t} ADD COLUMN z DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP",
    ),
}


class Upstream:
    """One source database with the two shards, a reader on it, and the sink's target."""

    def __init__(
        self,
        services: Settings,
        make_topic: Callable[..., str],
        make_database: Callable[..., str],
    ) -> None:
        self.services = services
        self.server = services.sources[0]
        self.db = make_database(self.server)
        self.target_db = make_database(services.resolved_sink)
        self.topic = make_topic("session", 3)
        self.control = make_topic("control", 1)
        self.setup = ReaderSetup(
            services=services,
            server=self.server,
            source=self.topic,
            database=self.db,
            data_topic=self.topic,
            checkpoints_topic=make_topic("ckpt", 1),
            schemas_topic=make_topic("schemas", 1),
        )
        with connect(self.server, self.db) as conn, conn.cursor() as cur:
            for t in SHARDS:
                cur.execute(TABLE.format(t=t))
        with connect(services.resolved_sink, self.target_db) as conn, conn.cursor() as cur:
            cur.execute(TABLE.format(t="orders"))
        self.routes = [RouteSettings(match=f"{self.db}.o_*", target=f"{self.target_db}.orders")]
        self.tables = [(self.topic, self.db, t) for t in SHARDS]
        self.lock = f"{self.target_db}.orders#1"

    def rows(self, first: int, value: str, database: str | None = None, server: Any = None) -> None:
        with connect(server or self.server, database or self.db) as conn, conn.cursor() as cur:
            for n, t in enumerate(SHARDS if database is None else ("orders",) * 2):
                for i in range(first, first + 5):
                    cur.execute(
                        f"INSERT INTO {t} (id, v) VALUES (%s, %s)", (n * 1000 + i, f"{value}{i}")
                    )

    def ddl(self, case: str) -> None:
        session, statement = SESSIONS[case]
        for t in SHARDS:
            with connect(self.server, self.db) as conn, conn.cursor() as cur:
                cur.execute(session)
                cur.execute(statement.format(t=t))

    def equal(self) -> bool:
        """`rowbus verify` equal, and every row equal column for column (the tables are small;
        a DEFAULT CURRENT_TIMESTAMP column run at another moment changes every row the same
        way, which verify's checksum missed while it XORed CRC32s)."""
        diffs = verify(self.services, self.routes, [self.db])
        if not (len(diffs) == 1 and diffs[0].equal):
            return False
        with connect(self.server, self.db) as conn, conn.cursor() as cur:
            cur.execute(" UNION ALL ".join(f"SELECT * FROM {t}" for t in SHARDS) + " ORDER BY 1")
            upstream = cur.fetchall()
        with connect(self.services.resolved_sink, self.target_db) as conn, conn.cursor() as cur:
            cur.execute("SELECT * FROM orders ORDER BY 1")
            return cur.fetchall() == upstream


@pytest.mark.parametrize("case", sorted(SESSIONS))
def test_the_subscriber_runs_a_coordinated_ddl_under_the_source_session(
    case: str,
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    up = Upstream(services, make_topic, make_database)
    groups = ShardGroups.build(
        shard_routes([(f"{up.db}.o_*", f"{up.target_db}.orders")]), up.tables
    )
    ddl_state = unique("rowbus_ddl")
    store = MemoryCheckpointStore()
    with ExitStack() as stack:
        stack.enter_context(reader_thread(up.setup, heartbeat_interval_s=0.2))
        readers_ready(services, [up.topic])
        up.rows(1, "abcdefgh")
        up.ddl(case)
        up.rows(100, "")  # "100": fits VARCHAR(3)
        sub = Subscriber(
            services.kafka.client_config(),
            [up.topic],
            store=store,
            sources=[up.topic],
            topic_template="{source}",
            checkpoints_topic=up.setup.checkpoints_topic,
            schemas_topic=up.setup.schemas_topic,
            group_id=unique("sub"),
        )
        sub.start()
        stack.callback(sub.close)
        coord = coordinator(
            services, up.control, "sub-job", groups, execute=executor(services, ddl_state)
        )
        stack.callback(coord.close)
        sharded = ShardedApply(coord, SinkApply(services, up.target_db, sub))

        def done() -> bool:
            for txn in sub.poll(0.2):
                sharded.handle(txn)
            sharded.poll()
            lock = coord.table.get(up.lock)
            return lock is not None and lock.state is LockState.DONE and sharded.held() == 0

        wait_for(done, timeout=90, what=f"lock {up.lock} to be executed", stop_on=(Exception,))
        for _ in range(5):
            done()  # the rows after the DDL
        wait_for(up.equal, timeout=60, what="the target to equal the union of the shards")
        lock = coord.table.get(up.lock)
        assert lock is not None
        session = lock.session
        if case == "lenient":
            assert session.sql_mode == ""
        elif case == "timestamp":
            assert session.timestamp_us == 1_700_000_000_123_456
        else:
            assert session.time_zone == "+05:30"
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{ddl_state}`")


@pytest.mark.parametrize("case", sorted(SESSIONS))
def test_the_spark_hook_runs_a_coordinated_ddl_under_the_source_session(
    case: str,
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    up = Upstream(services, make_topic, make_database)
    job = unique("job")
    sink = services.resolved_sink
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=(up.topic,),
            topic_template="{source}",
            schemas_topic=up.setup.schemas_topic,
            routes=tuple(
                RouteSettings(match=r.match, target=r.target, sharded=True) for r in up.routes
            ),
            unrouted="skip",
            checkpoint_location=tmp_path / "cp",
            state_database=f"state_{job}",
            master="local[1]",
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=sink.host, port=sink.port, user=sink.user, password=sink.password),
    )
    ddl_state = unique("rowbus_ddl")
    index = TopicReader(services, up.topic)
    with ExitStack() as stack:
        stack.callback(index.close)
        stack.enter_context(reader_thread(up.setup, heartbeat_interval_s=0.2))
        readers_ready(services, [up.topic])
        up.rows(1, "abcdefgh")
        up.rows(1, "abcdefgh", up.target_db, sink)  # what the job applied before the DDL
        up.ddl(case)

        def ddls() -> dict[str, Envelope]:
            # a DDL goes to every partition (PROTOCOL.md): one copy per shard
            found: dict[str, Envelope] = {}
            for p, o, _, r in index.records:
                # (the shard's coordinated DDL, not the definition a reader publishes before a
                # table's first row, PROTOCOL.md §9.6)
                if isinstance(r, DdlChange) and r.table in SHARDS and coordinated(r.statement):
                    found.setdefault(r.table, Envelope(up.topic, p, o, r))
            return found

        index.until(lambda _: len(ddls()) == len(SHARDS), 60, "both shards' DDL")
        events = list(ddls().values())
        hook = ShardDdlHook(
            config, up.tables, control_topic=up.control, actor=job, state_database=ddl_state
        ).start()
        stack.callback(hook.close)
        # As the planner does: each DDL waits at the gate, and is reported after the batch that
        # applied the rows before it; the hook's coordinator executes once both reported.
        for env in events:
            assert not hook.ddl_ready(env)
            hook.after_apply()

        def released() -> bool:
            hook.before_plan()
            return all(hook.ddl_ready(env) for env in events)

        wait_for(released, timeout=60, what=f"lock {up.lock} to be executed", stop_on=(Exception,))
        assert up.equal(), verify(services, up.routes, [up.db])
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{ddl_state}`")
