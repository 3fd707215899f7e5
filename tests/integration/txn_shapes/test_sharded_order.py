"""The sharded subscriber behind a real reader: a table sharded by a column that changes, and a
table without a primary key. Each shard replays what it gets onto its own tables: no shard may
see a change of a row it never got (an update before its insert), and the shards' tables
together must equal the source."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from rowbus.config import Settings
from rowbus.consumers.sharded import ShardedSubscriber, ShardTransaction
from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.txn_shapes.shapes import table_rows

SHARDS = 4
ROWS = 24


def test_shard_field_changes_and_keyless_rows_keep_per_row_order(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    server = services.sources[0]
    db = make_database(server)
    topic = make_topic("src", partitions=3)
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,
        database=db,
        data_topic="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
    )
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE s (id INT PRIMARY KEY, g INT NOT NULL, v INT)")
        cur.execute("CREATE TABLE k (x INT, y VARCHAR(10) NULL)")
    models: dict[int, dict[str, Counter[tuple[Any, ...]]]] = {}
    problems: list[str] = []
    lock = threading.Lock()

    def handle(part: ShardTransaction) -> None:
        with lock:
            tables = models.setdefault(part.shard, {})
            for e in part.events:
                if not isinstance(e, RowChange):
                    continue
                rows = tables.setdefault(e.table, Counter())
                if e.before is not None:
                    if rows[tuple(e.before)] == 0:
                        problems.append(f"shard {part.shard}: {e.op.name} of a row it never got")
                    rows[tuple(e.before)] -= 1
                if e.after is not None and e.op is not Op.DELETE:
                    rows[tuple(e.after)] += 1

    sub = ShardedSubscriber(
        services.kafka.client_config(),
        [topic],
        handle,
        zookeeper_hosts=services.zookeeper.hosts or "",
        zookeeper_root=f"/{unique('rowbus')}",
        group=unique("group"),
        shards=SHARDS,
        shard_columns={f"{db}.s": ["g"]},
        member="only",
        session_timeout_s=4.0,
        sources=[topic],
        topic_template="{source}",
        checkpoints_topic=checkpoints,
        schemas_topic=schemas,
        group_id=unique("sub"),
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            with sub:
                sub.run(should_stop=stop.is_set)
        except BaseException as exc:
            errors.append(exc)

    with reader_thread(setup, heartbeat_interval_s=0.3):
        index = TopicReader(services, checkpoints)
        index.until(
            lambda rs: any(isinstance(r, ReaderCheckpoint) for r in rs),
            timeout=60,
            what="the reader's first checkpoint",
        )
        index.close()
        thread = threading.Thread(target=loop, name="sharded")
        thread.start()
        try:
            with connect(server, db) as conn, conn.cursor() as cur:
                for i in range(ROWS):
                    cur.execute("INSERT INTO s VALUES (%s, %s, 0)", (i, i))
                for i in range(ROWS):  # every row moves to another shard field value...
                    cur.execute("UPDATE s SET g = g + 1000 WHERE id = %s", (i,))
                    cur.execute("UPDATE s SET v = v + 1 WHERE id = %s", (i,))  # ...and on
                cur.execute("DELETE FROM s WHERE id % 3 = 0")
                cur.execute("INSERT INTO k VALUES (1, 'a'), (1, 'a'), (2, NULL), (3, 'c')")
                for n in range(5):
                    cur.execute("UPDATE k SET y = %s WHERE x = 2", (f"y{n}",))
                    cur.execute("UPDATE k SET x = x + 10 WHERE x IN (3, 13, 23, 33)")
                cur.execute("DELETE FROM k WHERE x = 1 LIMIT 1")

            def union(table: str) -> Counter[tuple[Any, ...]]:
                with lock:
                    total: Counter[tuple[Any, ...]] = Counter()
                    for tables in models.values():
                        total.update(+tables.get(table, Counter()))
                    return total

            want = {t: table_rows(server, db, t) for t in ("s", "k")}
            wait_for(
                lambda: bool(errors) or all(union(t) == want[t] for t in want),
                timeout=90,
                what="the shards' tables to equal the source",
            )
        finally:
            stop.set()
            thread.join(60)
    assert not errors, errors[0]
    assert problems == []
    assert all(union(t) == want[t] for t in want)
    assert len(models) > 1  # the rows did spread over shards
