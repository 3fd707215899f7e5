"""Sharded consumption on a real broker and ZooKeeper: two members with separate sessions
split the shards; when one joins or leaves, shards are handed over from their storage points
with no loss and — the hand-overs being graceful — no duplicate; order is kept per shard."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rowbus.config import Settings
from rowbus.consumers.sharded import ShardedSubscriber, ShardTransaction
from rowbus.consumers.sharded.assignment import ShardKey
from rowbus.waiting import wait_for
from tests.integration.consumers.publisher import TABLE, TestPublisher, publish_schema, txn_events

SHARDS = 4


class Running:
    """`sub` stepping in a thread from `start()` until `stop()`, then closed (its error raised)."""

    def __init__(self, sub: ShardedSubscriber) -> None:
        self.sub = sub
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._loop, name=f"sharded-{sub.member}")

    def _loop(self) -> None:
        try:
            with self.sub:
                self.sub.run(should_stop=self._stop.is_set)
        except BaseException as exc:
            self._errors.append(exc)

    def start(self) -> Running:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"{self.sub.member} did not stop"
        if self._errors:
            raise self._errors[0]


def test_shards_move_between_members_without_loss_or_duplicate(
    services: Settings, make_topic: Callable[..., str], unique: Callable[[str], str]
) -> None:
    sources = [make_topic("a"), make_topic("b")]
    schemas = make_topic("schemas", partitions=1)
    publish_schema(services, schemas)
    publishers = [TestPublisher(services, s, rank) for rank, s in enumerate(sources)]
    handled: list[tuple[str, ShardTransaction]] = []
    group, root = unique("group"), f"/{unique('rowbus')}"
    assert services.zookeeper.hosts is not None

    def member(name: str) -> ShardedSubscriber:
        return ShardedSubscriber(
            services.kafka.client_config(),
            sources,
            lambda part: handled.append((name, part)),
            zookeeper_hosts=services.zookeeper.hosts or "",
            zookeeper_root=root,
            group=group,
            shards=SHARDS,
            member=name,
            session_timeout_s=4.0,
            sources=sources,
            topic_template="{source}",
            checkpoints_topic=make_topic("ckpt", partitions=1),
            schemas_topic=schemas,
            group_id=unique("sub"),
        )

    def publish(ks: range) -> None:
        for p in publishers:
            p.publish(ks)

    def rows_up_to(n: int) -> set[tuple[str, int]]:
        # the last transaction of the last source waits for the first source's next watermark
        return {
            (e.txn.id, e.image[0])
            for k in range(n)
            for rank, s in enumerate(sources)
            if (k, rank) != (n - 1, 1)
            for e in txn_events(s, k, rank)
        }

    def seen() -> set[tuple[str, int]]:
        return {(p.id, e.image[0]) for _, p in list(handled) for e in p.events}

    publish(range(20))
    run_a = Running(member("a")).start()
    run_b = None
    try:
        a = run_a.sub
        wait_for(lambda: seen() >= rows_up_to(20), timeout=60, what="a to handle 20 txns")
        assert a.held == set(range(SHARDS))
        run_b = Running(member("b")).start()
        b = run_b.sub
        wait_for(
            lambda: a.held == {0, 2} and b.held == {1, 3},
            timeout=60,
            what="b to take half the shards",
        )
        publish(range(20, 40))
        wait_for(lambda: seen() >= rows_up_to(40), timeout=60, what="40 txns handled")
        run_a.stop()  # a leaves: b takes its shards over from their storage points
        wait_for(lambda: b.held == set(range(SHARDS)), timeout=60, what="b to hold all shards")
        publish(range(40, 60))
        wait_for(lambda: seen() >= rows_up_to(60), timeout=60, what="60 txns handled")
    finally:
        run_a.stop()
        if run_b is not None:
            run_b.stop()
    # every shard was handled by a (alone at first), then by b (half of them once b joined,
    # the rest once a left)
    for shard in range(SHARDS):
        assert next(n for n, p in handled if p.shard == shard) == "a"
        assert [n for n, p in handled if p.shard == shard][-1] == "b"

    rows = [(p.id, e.image[0]) for _, p in handled for e in p.events]
    assert len(rows) == len(set(rows)), "a row was handled twice"
    assert set(rows) >= rows_up_to(60)
    key = ShardKey(SHARDS)
    for shard in range(SHARDS):
        parts = [p for _, p in handled if p.shard == shard]
        assert parts, f"shard {shard} got nothing"
        # every row in the shard its key names, and each shard in commit order
        assert all(key.of(e, TABLE) == shard for p in parts for e in p.events)
        order = [(p.ts, sources.index(p.source)) for p in parts]
        assert order == sorted(order)
