"""Benchmarks: ``python -m benchmarks.merger merger|big-transaction|subscriber``.

``merger``: events/s through the merger alone (push, release, iterate) for W1-shaped rows
(10 columns, 100-row transactions) from two sources over three partitions each.
``big-transaction``: one transaction of N rows (default 1M) through the merger with a memory
limit, reporting time, spilled events and the process's peak RSS.
``subscriber``: the Subscriber end to end on a real broker (``--bootstrap-servers``), with the
merger alone measured in the same run (see `benchmarks.subscriber`).
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from collections.abc import Iterator

from benchmarks.workloads import w1_table
from rowbus.merge.merger import Merger
from rowbus.protocol.events import BinlogPosition, Event, Op, Resolved, RowChange, TxnRef
from rowbus.workloads import w1_row as w1_values

BASE_TS = int(time.time() * 1000) << 16
W1 = w1_table()
_RNG = random.Random(1)


def w1_row(source: str, ts: int, txn: str, index: int, count: int | None, pk: int) -> RowChange:
    """A W1 insert (values from `rowbus.workloads.w1_row`) at a given place in a transaction."""
    return RowChange(
        source=source,
        ts=ts,
        op=Op.INSERT,
        schema="bench",
        table="w1",
        schema_id=W1.schema_id,
        primary_key=W1.primary_key,
        before=None,
        after=w1_values(_RNG, pk),
        txn=TxnRef(txn, index, count),
        position=BinlogPosition("bin.000001", 4 + pk * 10, txn),
    )


def w1_stream(
    sources: int, partitions: int, txns: int, rows: int, *, prefix: str = "rowbus."
) -> Iterator[tuple[str, int, Event]]:
    """(topic, partition, event) for `txns` transactions of `rows` rows per source, each
    followed by a Resolved broadcast. Source ``s{i}`` writes to topic ``{prefix}s{i}`` (and,
    with a prefix other than the default, is named like its topic)."""
    pk = 0
    for k in range(txns):
        ts = BASE_TS + k + 1
        for s in range(sources):
            topic = f"{prefix}s{s}"
            source = f"s{s}" if prefix == "rowbus." else topic
            for i in range(rows):
                pk += 1
                yield topic, pk % partitions, w1_row(source, ts, f"{source}-{k}", i, rows, pk)
            for p in range(partitions):
                yield topic, p, Resolved(source=source, ts=ts)


def bench_merger(events: int, sources: int = 2, partitions: int = 3, rows: int = 100) -> None:
    txns = max(1, events // (sources * (rows + partitions)))
    data = list(w1_stream(sources, partitions, txns, rows))
    lanes = [(f"rowbus.s{s}", p, f"s{s}") for s in range(sources) for p in range(partitions)]
    merger = Merger(lanes)
    offsets: dict[tuple[str, int], int] = {}
    released = 0
    start = time.perf_counter()
    for n, (topic, partition, event) in enumerate(data):
        offset = offsets.get((topic, partition), 0)
        offsets[topic, partition] = offset + 1
        merger.push(topic, partition, offset, event)
        if n % 512 == 0:
            for txn in merger.release():
                released += sum(1 for _ in txn.events)
    for txn in merger.release():
        released += sum(1 for _ in txn.events)
    seconds = time.perf_counter() - start
    print(
        f"merger: {len(data)} records ({released} rows in {txns * sources} transactions) "
        f"in {seconds:.2f}s = {len(data) / seconds:,.0f} records/s, "
        f"{released / seconds:,.0f} rows/s"
    )


def bench_big_transaction(rows: int, memory_limit: int, partitions: int = 3) -> None:
    topic, source, ts = "rowbus.big", "big", BASE_TS + 1
    merger = Merger([(topic, p, source) for p in range(partitions)], memory_limit=memory_limit)
    start = time.perf_counter()
    for pk in range(rows):
        event = w1_row(source, ts, "big-txn", pk, rows, pk)
        merger.push(topic, pk % partitions, pk // partitions, event)
    for p in range(partitions):
        merger.push(topic, p, rows, Resolved(source=source, ts=ts))
    pushed = time.perf_counter() - start
    (txn,) = merger.release()
    seen = 0
    for item in txn.events:
        assert item.txn is not None
        assert item.txn.index == seen, (item.txn.index, seen)
        seen += 1
    total = time.perf_counter() - start
    assert seen == rows
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"big transaction: {rows} rows, memory limit {memory_limit} events, "
        f"{merger.stats.spilled_events} spilled; push {pushed:.1f}s, total {total:.1f}s "
        f"({rows / total:,.0f} rows/s); peak RSS {peak_mb:.0f} MB"
    )
    merger.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.merger", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("merger", help="events/s through the merger alone")
    m.add_argument("--events", type=int, default=300_000)
    b = sub.add_parser("big-transaction", help="one huge transaction under a memory limit")
    b.add_argument("--rows", type=int, default=1_000_000)
    b.add_argument("--memory-limit", type=int, default=50_000, help="events kept in memory")
    s = sub.add_parser("subscriber", help="events/s through the Subscriber from a real broker")
    s.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    s.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args(argv)
    if args.what == "merger":
        bench_merger(args.events)
    elif args.what == "subscriber":
        from benchmarks.subscriber import bench_subscriber

        print(bench_subscriber(args.bootstrap_servers, args.events))
    else:
        bench_big_transaction(args.rows, args.memory_limit)


if __name__ == "__main__":
    main()
