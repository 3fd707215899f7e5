"""The plain-subscriber path: readers -> Kafka -> Subscriber -> ShardedApply -> sink, with a
restart from the saved safe checkpoint while a lock is half-way."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from rowbus.config import Settings
from rowbus.consumers.sharded_apply import ShardedApply
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.routing.routes import RouteSettings
from rowbus.shard_ddl.coordinator import Coordinator
from rowbus.shard_ddl.groups import ShardGroups
from rowbus.shard_ddl.locks import LockState
from rowbus.testing import shard_routes
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, reader_thread
from tests.integration.shard_ddl.helpers import (
    SinkApply,
    columns,
    coordinator,
    executor,
    readers_ready,
)


def test_subscriber_path_holds_a_shard_and_resumes_from_its_safe_checkpoint(
    services: Settings, make_topic, make_database, unique
) -> None:
    servers = list(services.sources[:2])
    dbs = [make_database(s) for s in servers]
    target_db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, target_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT)")
    for srv, db in zip(servers, dbs, strict=True):
        with connect(srv, db) as conn, conn.cursor() as cur:
            for k in (1, 2):
                cur.execute(f"CREATE TABLE o_{k} (id BIGINT PRIMARY KEY, v INT)")
    topics = [make_topic("subsrc", 3) for _ in servers]
    schemas = make_topic("schemas", 1, **{"cleanup.policy": "compact"})
    ckpts = make_topic("ckpt", 1, **{"cleanup.policy": "compact"})
    control = make_topic("control", 1)
    shards = [(s, k) for s in (0, 1) for k in (1, 2)]
    groups = ShardGroups.build(
        shard_routes([(f"{db}.o_*", f"{target_db}.orders") for db in dbs]),
        [(topics[s], dbs[s], f"o_{k}") for s, k in shards],
    )
    ddl_state = unique("rowbus_ddl")
    store = MemoryCheckpointStore()

    written = dict.fromkeys(shards, 0)

    def write(shard: tuple[int, int], n: int, *, wide: bool = False) -> None:
        s, k = shard
        with connect(servers[s], dbs[s]) as conn, conn.cursor() as cur:
            for i in range(n):
                written[shard] += 1
                key = (s * 10 + k) * 1000 + written[shard]
                if wide:
                    cur.execute(f"INSERT INTO o_{k} (id, v, w) VALUES (%s, %s, %s)", (key, i, i))
                else:
                    cur.execute(f"INSERT INTO o_{k} (id, v) VALUES (%s, %s)", (key, i))
            cur.execute(f"DELETE FROM o_{k} WHERE id=%s", ((s * 10 + k) * 1000 + written[shard],))

    def alter(shard: tuple[int, int]) -> None:
        s, k = shard
        with connect(servers[s], dbs[s]) as conn, conn.cursor() as cur:
            cur.execute(f"ALTER TABLE o_{k} ADD COLUMN w INT NULL")

    def session(stack: ExitStack) -> tuple[Subscriber, ShardedApply, Coordinator]:
        sub = Subscriber(
            services.kafka.client_config(),
            topics,
            store=store,
            sources=topics,
            topic_template="{source}",
            checkpoints_topic=ckpts,
            schemas_topic=schemas,
            group_id=unique("sub"),
        )
        sub.start()
        stack.callback(sub.close)
        coord = coordinator(
            services, control, "sub-job", groups, execute=executor(services, ddl_state)
        )
        stack.callback(coord.close)
        return sub, ShardedApply(coord, SinkApply(services, target_db, sub)), coord

    def pump(sub: Subscriber, sharded: ShardedApply) -> Callable[[], bool]:
        def step() -> bool:
            for txn in sub.poll(0.2):
                sharded.handle(txn)
            sharded.poll()
            cp = sharded.safe_checkpoint()
            if cp is not None:
                store.save(cp)
            return False

        return step

    lock = f"{target_db}.orders#1"
    setups = [
        ReaderSetup(
            services=services,
            server=srv,
            source=topic,
            database=db,
            data_topic=topic,
            checkpoints_topic=ckpts,
            schemas_topic=schemas,
        )
        for srv, db, topic in zip(servers, dbs, topics, strict=True)
    ]
    with ExitStack() as readers:
        for setup in setups:
            readers.enter_context(reader_thread(setup, heartbeat_interval_s=0.2))
        readers_ready(services, topics)
        for shard in shards:
            write(shard, 20)
        with ExitStack() as stack:
            sub, sharded, coord = session(stack)
            step = pump(sub, sharded)
            for shard in shards[:2]:
                alter(shard)
                write(shard, 10, wide=True)  # held: the target has no w yet
            write(shards[3], 10)

            def half_way() -> bool:
                step()
                found = coord.table.get(lock)
                return found is not None and len(found.arrived) == 2 and sharded.held() >= 20

            wait_for(half_way, timeout=60, what="two shards at the lock, their rows held")
            assert columns(services.resolved_sink, target_db, "orders") == [
                ("id", "bigint(20)"),
                ("v", "int(11)"),
            ]
        # the subscriber stops half-way; it resumes from the safe checkpoint it saved
        for shard in shards[2:]:
            alter(shard)
            write(shard, 10, wide=True)
        with ExitStack() as stack:
            sub, sharded, coord = session(stack)
            step = pump(sub, sharded)
            routes = [RouteSettings(match=f"{db}.o_*", target=f"{target_db}.orders") for db in dbs]

            last: list[Any] = []

            def equal() -> bool:
                step()
                diffs = verify(services, routes, dbs)
                last[:] = [diffs, coord.table.get(lock), sharded.held(), sharded.gate.waiting()]
                return len(diffs) == 1 and diffs[0].equal

            try:
                wait_for(equal, timeout=90, what="the target to equal the union of the 4 shards")
            except Exception:
                print("DIAG", last)
                raise
            found: Any = coord.table.get(lock)
            assert found.state is LockState.DONE
            assert len(found.executed) == 1
            assert sharded.held() == 0
    assert columns(services.resolved_sink, target_db, "orders")[-1] == ("w", "int(11)")
    with connect(services.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE `{ddl_state}`")
