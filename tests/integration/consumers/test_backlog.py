"""A Subscriber far behind on a three-partition topic, on the real broker: it keeps releasing in
order with a bounded buffer, and a restart half-way neither loses nor repeats a transaction.

noida-db answers a fetch with a partition's whole backlog (it ignores fetch sizes), so
librdkafka hands the records over one partition after another; without flow control the merge
buffered (and spilled) every partition but the last before it could release anything. The
Subscriber pauses the partitions running ahead of the merge and resumes each once the merge
waits for it.

W1 (10 columns, 100-row transactions) is pre-published exactly as a reader publishes it (rows by
key, a Resolved to every partition after each transaction); the same rows are in a source
database (written without the binlog), so `rowbus verify` compares the sink with it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from benchmarks.workloads import w1_table, w1_transactions
from rowbus.clients import kafka
from rowbus.config import Settings
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.checkpoint import Checkpoint
from rowbus.protocol.codec import encode
from rowbus.protocol.events import Resolved, SchemaRecord, TableSchema
from rowbus.protocol.partition import encode_key, java_partition
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from rowbus.workloads import W1_DDL, w1_row
from tests.conftest import connect
from tests.integration.snapshot.helpers import BulkApply

ROWS = 60_000
"""20k rows a partition, twice READ_AHEAD: without flow control the merge would hold a whole
partition or two (far past the bound asserted) before it could release (300k took 31 s; 120k
and a READ_AHEAD of 20k checked the same ratio at twice the cost)."""
PER_TXN = 100
TXNS = ROWS // PER_TXN
PARTITIONS = 3
READ_AHEAD = 10_000
BATCH = 2000
SEED = 1


def _source_rows(services: Settings, database: str) -> None:
    """The W1 rows the topic carries, in the source (not in its binlog)."""
    import random

    rng = random.Random(SEED)  # w1_transactions draws the rows in the same order
    with connect(services.sources[0], database, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(W1_DDL.format(name=f"`{database}`.`w1`"))
        for first in range(1, ROWS + 1, 5000):
            rows = [w1_row(rng, k) for k in range(first, min(first + 5000, ROWS + 1))]
            cur.executemany(
                f"INSERT INTO `{database}`.`w1` VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
            conn.commit()


def _publish(services: Settings, topic: str, schemas: str, table: TableSchema) -> None:
    """W1 as a reader publishes it, in Kafka transactions of ~20k records."""
    config = services.kafka.client_config()
    producer = kafka.producer({**config, "transactional.id": f"{topic}-w", "linger.ms": 20})
    producer.init_transactions(15)
    producer.begin_transaction()
    value, headers = encode(SchemaRecord.of(table, topic, 0))
    producer.produce(schemas, value, partition=0, headers=list(headers))
    sent = 0
    for ts, txn in w1_transactions(topic, ROWS, per_txn=PER_TXN, seed=SEED, table=table):
        records = [
            (java_partition(encode_key(table.schema, table.table, (ev.after[0],)), PARTITIONS), ev)
            for ev in txn
            if ev.after is not None
        ]
        records += [(p, Resolved(source=topic, ts=ts)) for p in range(PARTITIONS)]
        for partition, event in records:
            value, headers = encode(event)
            for _ in range(10_000):  # bounded: the local queue drains within seconds
                try:
                    producer.produce(topic, value, partition=partition, headers=list(headers))
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        if sent >= 20_000:
            producer.commit_transaction(60)
            producer.begin_transaction()
            sent = 0
    producer.commit_transaction(60)


def _not_behind(before: Checkpoint | None, after: Checkpoint) -> bool:
    if before is None:
        return True
    return after.ts >= before.ts and all(
        after.offsets.get(tp, 0) >= offset for tp, offset in before.offsets.items()
    )


def test_a_multi_partition_backlog_is_merged_in_order_with_a_bounded_buffer_across_a_restart(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
) -> None:
    database = make_database(services.sources[0])
    sink_db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, sink_db) as conn, conn.cursor() as cur:
        cur.execute(W1_DDL.format(name=f"`{sink_db}`.`w1`"))
    topic = make_topic("backlog", partitions=PARTITIONS)
    schemas = make_topic("schemas", partitions=1)
    checkpoints = make_topic("ckpt", partitions=1)
    table = w1_table(database, "w1")
    _source_rows(services, database)
    _publish(services, topic, schemas, table)

    store = MemoryCheckpointStore()
    apply = BulkApply(services.resolved_sink, sink_db)
    delivered: dict[str, int] = {}
    saved: list[Checkpoint] = []
    last_ts = 0
    peak = 0
    started = time.monotonic()
    first_release: float | None = None
    try:
        for leg, stop_after in enumerate((TXNS // 2, TXNS)):
            deadline = time.monotonic() + 300
            with Subscriber(
                services.kafka.client_config(),
                [topic],
                store=store,
                sources=[topic],
                topic_template="{source}",
                checkpoints_topic=checkpoints,
                schemas_topic=schemas,
                group_id=f"{topic}-sub",
                batch_size=BATCH,
                read_ahead=READ_AHEAD,
            ) as sub:
                for _ in itertools.count():
                    assert time.monotonic() < deadline, (
                        f"leg {leg}: {len(delivered)} of {TXNS} transactions after 300 s; "
                        f"{sub.merger.buffered} buffered; {sub.blocked_by()}"
                    )
                    txns = sub.poll(0.5)
                    # The buffer stays bounded: a partition ahead of the merge is paused once
                    # the merge holds READ_AHEAD events (checked after every poll, so a run
                    # without flow control fails here instead of spilling for minutes).
                    peak = max(peak, sub.merger.buffered)
                    assert sub.merger.buffered <= READ_AHEAD + 2 * BATCH, (
                        f"{sub.merger.buffered} events buffered, {len(delivered)} transactions "
                        f"released: {sub.blocked_by()}"
                    )
                    if not txns:
                        continue
                    first_release = first_release or time.monotonic()
                    for txn in txns:
                        assert txn.ts >= last_ts, f"{txn.id} released out of order"
                        last_ts = txn.ts
                        delivered[txn.id] = delivered.get(txn.id, 0) + 1
                    apply(sub, txns)
                    checkpoint = txns[-1].checkpoint
                    assert _not_behind(saved[-1] if saved else None, checkpoint)
                    sub.commit(txns[-1])
                    saved.append(checkpoint)
                    if len(delivered) >= stop_after:
                        break
                assert sub.merger.stats.spilled_events == 0
    finally:
        apply.close()
    elapsed = time.monotonic() - started
    print(
        f"{TXNS} transactions ({ROWS} rows) over {PARTITIONS} partitions in {elapsed:.1f}s, "
        f"first release after {(first_release or started) - started:.1f}s, peak buffered {peak}"
    )
    assert len(delivered) == TXNS
    assert all(n == 1 for n in delivered.values()), "a transaction was delivered twice"
    assert apply.rows == ROWS
    routes = [RouteSettings(match=f"{database}.*", target=f"{sink_db}.{{table}}")]
    diffs = verify(services, routes, [database])
    assert len(diffs) == 1 and diffs[0].equal, diffs
