"""The Subscriber behind real binlog readers on both source servers: binlog order per source,
ts order across sources, every transaction written exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack

from rowbus.config import MySQLSettings, Settings
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.positions import parse_gtid
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import ReaderCheckpoint, RowChange
from tests.conftest import connect
from tests.definitions import is_definition_txn
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

TXNS = 40


def write(server: MySQLSettings, database: str, tag: int, out: list[tuple[str, list[int]]]) -> None:
    """`TXNS` transactions of 1-3 changes; records each one's GTID and the ids it touched."""
    with connect(server, database, autocommit=False) as conn, conn.cursor() as cur:
        for k in range(TXNS):
            ids = [k * 10 + i for i in range(k % 3 + 1)]
            for i in ids:
                cur.execute("INSERT INTO t VALUES (%s, %s)", (i, tag))
            if k % 4 == 3:
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (ids[0],))
                ids.append(ids[0])
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            (gtid,) = cur.fetchone()  # type: ignore[misc]
            out.append((gtid, ids))


def test_subscriber_follows_binlog_order_per_source_and_ts_order_across_sources(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> None:
    checkpoints = make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"})
    schemas = make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"})
    setups = []
    for server in services.sources[:2]:
        setup = ReaderSetup(
            services=services,
            server=server,
            source=unique("src"),
            database=make_database(server),
            data_topic=make_topic("data", partitions=3),
            checkpoints_topic=checkpoints,
            schemas_topic=schemas,
        )
        with connect(server, setup.database) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT NOT NULL)")
        setups.append(setup)
    index = TopicReader(services, checkpoints)
    written: dict[str, list[tuple[str, list[int]]]] = {s.source: [] for s in setups}
    with ExitStack() as stack:
        for setup in setups:
            stack.enter_context(reader_thread(setup, heartbeat_interval_s=0.3))
        # readers start at `latest`: write only once each has published where that is
        index.until(
            lambda rs: {r.source for r in rs if isinstance(r, ReaderCheckpoint)} >= set(written),
            timeout=60,
            what="a first checkpoint of both readers",
        )
        index.close()
        writers = [
            threading.Thread(target=write, args=(s.server, s.database, n, written[s.source]))
            for n, s in enumerate(setups)
        ]
        for w in writers:
            w.start()
        for w in writers:
            w.join(120)
        assert all(len(w) == TXNS for w in written.values()), "the writers did not finish"
        got: list[Transaction] = []
        with Subscriber(
            services.kafka.client_config(),
            [s.data_topic for s in setups],
            checkpoints_topic=checkpoints,
            schemas_topic=schemas,
            group_id=unique("sub"),
        ) as sub:
            sub.run(
                lambda t: None if is_definition_txn(t) else got.append(t),
                idle_timeout=30,
                should_stop=lambda: len(got) >= 2 * TXNS,
            )
            tables = {
                sub.table(e).qualified for t in got for e in t.events if isinstance(e, RowChange)
            }
    assert tables == {f"{s.database}.t" for s in setups}
    # globally in ts order
    assert [t.ts for t in got] == sorted(t.ts for t in got)
    for source, expected in written.items():
        mine = [t for t in got if t.source == source]
        gtids = [{e.position.gtid for e in t.events} for t in mine]
        assert all(len(g) == 1 for g in gtids), "a transaction mixes GTIDs"
        # per source: exactly the transactions written, in binlog (= commit) order
        assert [g.pop() for g in gtids] == [gtid for gtid, _ in expected]
        seqs = [parse_gtid(gtid)[1] for gtid, _ in expected]
        assert seqs == sorted(seqs)
        # whole: each transaction's rows, in statement order
        assert [[e.image[0] for e in t.events] for t in mine] == [ids for _, ids in expected]
