"""W3 as issue 28 states it, end to end: shard DDL never wedges the pipeline.

2 sources x 4 shard tables ``orders_N`` routed ``sharded: true`` into one target, plus a small
unsharded table ``moves`` on each source that some transactions write besides their shard;
three ALTERs per shard, each shard at its own (seeded random) moments while the writer runs;
the real readers, Kafka, the Spark apply job(s) (processes) with the shard-DDL hook, ZooKeeper
and the sink. Around each DDL the test commits a transaction on that shard and ``moves``: with
a transitive hold (the old rule) a shard's waiting lock held ``moves``, then another shard of
the same source, whose DDL was then never asked for, so the lock never completed. Now the
spanning transactions are split.

The writer makes ~1,200 writes, pausing while the test waits for the jobs. The apply job of
the current coordinator is killed with SIGKILL (driver and JVM) once lock #1 is half-reported;
more shards run their DDLs while it is down, then it is restarted. The run is made in three
layouts (`LAYOUTS`): one job per source in snapshot mode (two jobs share the target and elect
the coordinator through ZooKeeper: the other job takes over), and one job for both sources in
parallel mode, killed a second time right after lock #2 is done (while it releases the rows
that lock held, shard by shard in their own transactions), and one job for both sources in
snapshot mode (the issue's three layouts). Each ends with
every lock DONE once, by its shards (one DONE record, one marker row), the target's columns
those of the shards and its rows, as ``moves``', equal to upstream's row for row (`rowbus verify`).
"""

from __future__ import annotations

import json
import random
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

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
from tests.integration.shard_ddl.helpers import columns, election, readers_ready
from tests.integration.shard_ddl.test_w3 import Observer, WriterError, apply_process, kill9

MOVES_DDL = "CREATE TABLE moves (id BIGINT PRIMARY KEY, order_id BIGINT, note VARCHAR(32))"
DDLS = [
    ("ALTER TABLE {t} ADD COLUMN note VARCHAR(16) NULL", "note"),
    ("ALTER TABLE {t} MODIFY qty BIGINT", "wide"),
    ("ALTER TABLE {t} ADD COLUMN tag VARCHAR(16) NULL", "tag"),
]
WRITES = 1200
"""Writes of the run (~150 transactions per shard, one in ten also writing ``moves``); the
DDLs fall at random moments among them."""


@dataclass(frozen=True)
class Layout:
    per_source: bool
    """One apply job per source (else one for both)."""
    mode: Literal["snapshot", "parallel"]
    kills: int
    """1: kill -9 once lock #1 is half-reported; 2: also right after lock #2 is done."""


LAYOUTS = {
    "one-job-per-source-snapshot": Layout(per_source=True, mode="snapshot", kills=1),
    "one-job-for-both-parallel": Layout(per_source=False, mode="parallel", kills=2),
    "one-job-for-both-snapshot": Layout(per_source=False, mode="snapshot", kills=1),
}


class SpanningUpstream(test_w3.Upstream):
    """The W3 writer, where one write in ten also inserts a row of the source's ``moves``
    table in the same transaction; `span` commits one such now."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.moves = 0

    def create(self) -> None:
        super().create()
        for server, db in zip(self.servers, self.dbs, strict=True):
            with connect(server, db) as conn, conn.cursor() as cur:
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


def schedule(shards: list[tuple[int, int]], seed: int) -> list[tuple[int, tuple[int, int], int]]:
    """(after how many writes, shard, which DDL) for three DDLs per shard at random moments:
    each shard's own three in order, the shards' interleaved at random."""
    rng = random.Random(seed)
    moments = [
        (at, shard, n)
        for shard in shards
        for n, at in enumerate(sorted(rng.sample(range(50, WRITES - 100), len(DDLS))))
    ]
    return sorted(moments)


@pytest.mark.parametrize("layout", list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_w3_three_ddls_per_shard_spanning_transactions_and_a_kill_9_do_not_wedge(
    layout: Layout, services: Settings, make_topic, make_database, unique, tmp_path: Path
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
    jobs = [[0], [1]] if layout.per_source else [[0, 1]]

    def args(j: int) -> dict[str, Any]:
        """The apply job `j`'s process arguments: its sources, the whole shard group."""
        config = JobConfig(
            apply=ApplySettings(
                job=f"{job}_{j}",
                sources=tuple(topics[s] for s in jobs[j]),
                topic_template="{source}",
                schemas_topic=schemas_topic,
                mode=layout.mode,
                parallelism=2,
                routes=(
                    *(r.model_copy(update={"sharded": True}) for r in order_routes),
                    *move_routes,
                ),
                unrouted="skip",
                checkpoint_location=tmp_path / f"cp{j}",
                state_database=f"state_{job}_{j}",
                max_offsets_per_trigger=5000,
                master="local[1]",
            ),
            kafka=services.kafka.client_config(),
            sink=SinkConnection(
                host=sink.host, port=sink.port, user=sink.user, password=sink.password
            ),
        )
        return {
            "config": json.loads(config.dump()),
            "tables": [[topics[s], dbs[s], f"orders_{k}"] for s, k in up.shards]
            + [[topics[s], dbs[s], "moves"] for s in range(len(dbs))],
            "control_topic": control,
            "zookeeper": services.zookeeper.hosts,
            "election": job,
            "actor": f"{job}-apply{j}",
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
    first = f"{target}#1"
    with ExitStack() as stack, Observer(services, control) as obs:
        for setup in setups:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
        readers_ready(services, topics)
        procs = [
            stack.enter_context(
                apply_process(args(j), tmp_path / f"{j}.json", tmp_path / f"{j}.log")
            )
            for j in range(len(jobs))
        ]
        watch = stack.enter_context(closing(election(services, job, "w3-test")))
        up.limit = 0
        up.start()
        ran: list[list[tuple[int, int]]] = [[] for _ in DDLS]  # shards that ran each DDL
        kills: list[int] = []  # the jobs killed, in order: the coordinator's each time
        down: int | None = None  # the schedule's step at which the killed job restarts

        def kill_coordinator(i: int) -> None:
            nonlocal down
            holder = wait_for(watch.holder, timeout=150, what="a coordinator")
            kills.append(next(j for j in range(len(jobs)) if holder == args(j)["actor"]))
            assert procs[kills[-1]].poll() is None
            kill9(procs[kills[-1]])
            down = i + 2  # more shards run their DDLs while it is down

        def restart() -> None:
            nonlocal down
            j = kills[-1]
            log = tmp_path / f"re{len(kills)}.log"
            procs[j] = stack.enter_context(apply_process(args(j), log.with_suffix(".json"), log))
            down = None

        for i, (at, shard, n) in enumerate(schedule(up.shards, seed=28)):
            up.limit = at  # the writer pauses there while the test waits for the jobs
            wait_for(
                up.wrote(at - up.writes), timeout=60, what=f"{at} writes", stop_on=(WriterError,)
            )
            statement, feature = DDLS[n]
            up.span(shard)
            up.ddl(shard, statement, feature)
            up.span(shard)
            ran[n].append(shard)
            if not kills and 3 <= len(ran[0]) < len(up.shards):
                # lock #1 half-reported: kill -9 the coordinator's job
                obs.until(first, lambda lk: len(lk.arrived) >= 2, 150, "two shards reported")
                assert obs.refresh().get(first).state is LockState.WAITING  # type: ignore[union-attr]
                kill_coordinator(i)
            elif len(kills) < layout.kills and n == 1 and len(ran[1]) == len(up.shards):
                # lock #2 just done: kill -9 again while the jobs release what it held
                obs.until(f"{target}#2", lambda lk: lk.state is LockState.DONE, 180, "DONE")
                kill_coordinator(i)
            if i == down:
                restart()
        if down is not None:
            restart()
        assert len(kills) == layout.kills, f"the schedule had no kill point: {kills}"
        up.limit = WRITES  # the rest of the run's writes while the locks complete
        for n in range(1, len(DDLS) + 1):
            obs.until(
                f"{target}#{n}",
                lambda lk: lk.state is LockState.DONE,
                180,
                "DONE (every shard reached its DDL although spanning transactions wait)",
            )
        up.limit = up.writes + 25
        wait_for(up.wrote(25), timeout=30, what="writes after the last DDL", stop_on=(WriterError,))
        up.finish()

        def equal() -> bool:
            diffs = verify(services, [*order_routes, *move_routes], dbs)
            return len(diffs) == 3 and all(d.equal for d in diffs)

        wait_for(equal, timeout=120, what="orders and both moves tables equal upstream")
        obs.refresh()

    assert up.moves > 24
    assert columns(sink, target_db, "orders") == [
        ("id", "bigint(20)"),
        ("qty", "bigint(20)"),
        ("label", "varchar(32)"),
        ("note", "varchar(16)"),
        ("tag", "varchar(16)"),
    ]
    locks = [f"{target}#{n}" for n in range(1, len(DDLS) + 1)]
    done = [r.lock_id for r in obs.records if r.kind is ControlKind.DONE]
    assert sorted(done) == locks, "each DDL executed once"
    assert [(lk.lock_id, lk.state, lk.forced) for lk in obs.table] == [
        (lock, LockState.DONE, False) for lock in locks
    ], "every lock completed by its shards, none by an operator"
    with connect(sink) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT lock_id, state FROM `{state_ddl}`.shard_ddl_applied ORDER BY lock_id")
        assert cur.fetchall() == tuple((lock, "done") for lock in locks)
        cur.execute(f"DROP DATABASE `{state_ddl}`")
        for j in range(len(jobs)):
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}_{j}`")
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    assert "split" in logs, "the jobs log the first split transaction of a lock"
    print(f"\nW3 {layout}: {up.writes} writes, {up.moves} spanning transactions")
