"""W3 with transactions that span a shard and a shared table (issue 28), end to end.

2 sources x 2 shard tables ``orders_N`` merged into one target, plus a small unsharded table
``moves`` on each source that some transactions write besides their shard; two ALTERs per shard
run at a different moment on each shard while the writer runs; the real readers, Kafka, the
Spark apply job (a process) with the shard-DDL hook, ZooKeeper and the sink.

Right after a shard runs its DDL the test commits a transaction on that shard and ``moves``,
and before the next shard of the same source runs it, one on that shard and ``moves``: with a
transitive hold (the old rule) the first shard's lock held ``moves``, then the second shard,
whose DDL was then never asked for, so the lock could never complete. Now the spanning
transactions are split: every lock completes, each DDL runs once, and the target tables equal
their upstream tables row for row.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rowbus.config import Settings
from rowbus.protocol.events import ControlKind
from rowbus.routing.routes import RouteSettings
from rowbus.shard_ddl.locks import LockState
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.shard_ddl import test_w3
from tests.integration.shard_ddl.helpers import columns, readers_ready
from tests.integration.shard_ddl.test_w3 import Observer, WriterError, apply_process

MOVES_DDL = "CREATE TABLE moves (id BIGINT PRIMARY KEY, order_id BIGINT, note VARCHAR(32))"


class SpanningUpstream(test_w3.Upstream):
    """The W3 writer on two shards per source, where one write in ten also inserts a row of
    the source's ``moves`` table in the same transaction; `span` commits one such now."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.shards = [(s, k) for s in range(len(self.dbs)) for k in (1, 2)]
        self.features = {sh: set() for sh in self.shards}
        self.ids = {sh: [] for sh in self.shards}
        self.moves = 0

    def create(self) -> None:
        for server, db in zip(self.servers, self.dbs, strict=True):
            with connect(server, db) as conn, conn.cursor() as cur:
                for k in (1, 2):
                    cur.execute(test_w3.TABLE_DDL.format(k=k))
                cur.execute(MOVES_DDL)

    def span(self, shard: tuple[int, int]) -> None:
        with self.mutex, connect(self.servers[shard[0]], self.dbs[shard[0]], False) as conn:
            self._spanning(conn, shard, self.writes)

    def _spanning(self, conn: Any, shard: tuple[int, int], n: int) -> None:
        _, k = shard
        self.moves += 1
        oid = 10**12 + self.moves  # apart from the W3 writer's ids
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO orders_{k} (id, qty, label) VALUES (%s, %s, %s)", (oid, n, "s")
            )
            cur.execute(
                "INSERT INTO moves (id, order_id, note) VALUES (%s, %s, %s)",
                (self.moves, oid, f"m{n}"),
            )
        conn.commit()
        self.ids[shard].append(oid)

    def _one(self, conns: list[Any], n: int) -> None:
        if self.rng.random() < 0.1:
            shard = self.rng.choice(self.shards)
            conn = conns[shard[0]]
            conn.begin()
            self._spanning(conn, shard, n)
            return
        super()._one(conns, n)


def test_w3_transactions_spanning_a_waiting_shard_and_a_shared_table_do_not_wedge(
    services: Settings, make_topic, make_database, unique, tmp_path: Path
) -> None:
    servers = list(services.sources[:2])
    dbs = [make_database(srv) for srv in servers]
    sink = services.resolved_sink
    target_db = make_database(sink)
    target = f"{target_db}.orders"
    with connect(sink, target_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(32))")
        for s in range(len(dbs)):
            cur.execute(MOVES_DDL.replace("moves", f"moves{s}"))
    topics = [make_topic("w3span", 3) for _ in servers]
    schemas_topic = make_topic("schemas", 1, **{"cleanup.policy": "compact"})
    control = make_topic("control", 1)
    up = SpanningUpstream(servers, dbs)
    up.create()
    job = unique("w3span")
    state_ddl = unique("rowbus_ddl")
    order_routes = [RouteSettings(match=f"{db}.orders_*", target=target) for db in dbs]
    move_routes = [
        RouteSettings(match=f"{db}.moves", target=f"{target_db}.moves{s}")
        for s, db in enumerate(dbs)
    ]
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=tuple(topics),
            topic_template="{source}",
            schemas_topic=schemas_topic,
            routes=(
                *(r.model_copy(update={"sharded": True}) for r in order_routes),
                *move_routes,
            ),
            unrouted="skip",
            checkpoint_location=tmp_path / "cp",
            state_database=f"state_{job}",
            max_offsets_per_trigger=5000,
            master="local[1]",
        ),
        kafka=services.kafka.client_config(),
        sink=SinkConnection(host=sink.host, port=sink.port, user=sink.user, password=sink.password),
    )
    args = {
        "config": json.loads(config.dump()),
        "tables": [[topics[s], dbs[s], f"orders_{k}"] for s, k in up.shards]
        + [[topics[s], dbs[s], "moves"] for s in range(len(dbs))],
        "control_topic": control,
        "zookeeper": services.zookeeper.hosts,
        "election": job,
        "actor": f"{job}-apply",
        "state_database": state_ddl,
    }
    setups = [
        ReaderSetup(
            services=services,
            server=srv,
            source=topic,
            database=db,
            data_topic=topic,
            checkpoints_topic=make_topic("ckpt", 1, **{"cleanup.policy": "compact"}),
            schemas_topic=schemas_topic,
        )
        for srv, db, topic in zip(servers, dbs, topics, strict=True)
    ]
    locks = [
        ("ALTER TABLE {t} ADD COLUMN note VARCHAR(16) NULL", "note"),
        ("ALTER TABLE {t} MODIFY qty BIGINT", "wide"),
    ]
    with ExitStack() as stack, Observer(services, control) as obs:
        for setup in setups:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
        readers_ready(services, topics)
        stack.enter_context(apply_process(args, tmp_path / "job.json", tmp_path / "job.log"))
        up.start()
        wait_for(up.wrote(50), timeout=60, what="the writer to get going", stop_on=(WriterError,))
        for n, (statement, feature) in enumerate(locks, 1):
            # the two shards of one source first, so the first one's spanning transaction
            # and the second one's meet on that source's `moves` before the second's DDL
            order = [(0, 1), (0, 2), (1, 2), (1, 1)] if n == 1 else [(1, 1), (1, 2), (0, 2), (0, 1)]
            for shard in order:
                up.span(shard)
                up.ddl(shard, statement, feature)
                up.span(shard)
                wait_for(
                    up.wrote(25), timeout=30, what="writes between DDLs", stop_on=(WriterError,)
                )
            obs.until(
                f"{target}#{n}",
                lambda lk: lk.state is LockState.DONE,
                120,
                "DONE (every shard reached its DDL although spanning transactions wait)",
            )
        wait_for(up.wrote(25), timeout=30, what="writes after the last DDL", stop_on=(WriterError,))
        up.finish()

        def equal() -> bool:
            diffs = verify(services, [*order_routes, *move_routes], dbs)
            return len(diffs) == 3 and all(d.equal for d in diffs)

        wait_for(equal, timeout=120, what="orders and both moves tables equal upstream")

    assert up.moves > 8
    assert columns(sink, target_db, "orders") == [
        ("id", "bigint(20)"),
        ("qty", "bigint(20)"),
        ("label", "varchar(32)"),
        ("note", "varchar(16)"),
    ]
    done = [r.lock_id for r in obs.records if r.kind is ControlKind.DONE]
    assert sorted(done) == [f"{target}#1", f"{target}#2"]
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT lock_id, state FROM `{state_ddl}`.shard_ddl_applied ORDER BY lock_id")
        assert cur.fetchall() == ((f"{target}#1", "done"), (f"{target}#2", "done"))
        cur.execute(f"DROP DATABASE `{state_ddl}`")
        cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
    log_text = (tmp_path / "job.log").read_text(errors="replace")
    assert "split" in log_text, "the job logs the first split transaction of a lock"
    print(f"\nW3 spanning: {up.writes} writes, {up.moves} spanning transactions")
