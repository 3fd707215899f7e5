"""Reader benchmark: rows/s from binlog to committed in Kafka, beside the raw parse rate.

    python -m benchmarks.reader [--mysql HOST:PORT] [--kafka HOST:PORT] [--w1-rows N] [--w2-txns N]

W1: a 10-column table (BIGINT PK, INT, BIGINT, VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE,
TINYINT, TEXT, DATE) filled in 100-row transactions. W2: 8 tables, single-row transactions,
60% update / 20% insert / 20% delete. For each, the binlog range is written first, then read
twice: by mysql-replication alone (every value touched: the baseline) and by the reader (start
at the range, stop when its checkpoint passes the end), each in a fresh process so its peak RSS
is its own. `--profile` prints the reader's top functions. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import pstats
import random
import threading
import time
import uuid
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from benchmarks.common import binlog_end, connect, maxrss_mb
from rowbus.clients import kafka
from rowbus.clients.settings import SourceConnection
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.workloads import W1, W2


def _connect(args: argparse.Namespace, db: str | None = None) -> Any:
    return connect(args.mysql, args.user, args.password, db)


def write_w1(
    args: argparse.Namespace, db: str, rows: int
) -> tuple[tuple[str, int], tuple[str, int], int]:
    """W1 (`rowbus.workloads.W1`) into `db`; the binlog range it covers."""
    workload = W1(db)
    with _connect(args, db) as conn:
        workload.create(conn)
        start = binlog_end(conn)
        conn.autocommit(False)
        written = sum(workload.step(conn) for _ in range(rows // workload.rows_per_txn))
        conn.autocommit(True)
        end = binlog_end(conn)
    return start, end, written


def write_w2(
    args: argparse.Namespace, db: str, txns: int
) -> tuple[tuple[str, int], tuple[str, int], int]:
    """W2 (`rowbus.workloads.W2`, 500 rows per table first) into `db`; the range of its steps."""
    workload = W2(db, initial_rows=4000)
    with _connect(args, db) as conn:
        conn.autocommit(False)
        workload.create(conn)
        start = binlog_end(conn)
        written = sum(workload.step(conn) for _ in range(txns))
        end = binlog_end(conn)
    return start, end, written


def baseline(
    args: argparse.Namespace, db: str, start: tuple[str, int], end: tuple[str, int], out: Any
) -> None:
    host, port = args.mysql.split(":")
    stream = BinLogStreamReader(
        connection_settings={
            "host": host,
            "port": int(port),
            "user": args.user,
            "password": args.password,
        },
        server_id=4_000_000 + random.randint(0, 10**6),
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_schemas=[db],
        enable_logging=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    rows = 0
    began = time.perf_counter()
    for event in stream:
        for row in event.rows:
            for image in row.values():
                for _ in image.values():
                    pass
            rows += 1
        if (stream.log_file, stream.log_pos) >= end:
            break
    seconds = time.perf_counter() - began
    stream.close()
    out.put({"rows": rows, "seconds": seconds, "rss_mb": maxrss_mb()})


def run_reader(
    args: argparse.Namespace, db: str, start: tuple[str, int], end: tuple[str, int], out: Any
) -> None:
    host, port = args.mysql.split(":")
    tag = uuid.uuid4().hex[:8]
    settings = ReaderSettings(
        start=f"file:{start[0]}:{start[1]}",
        include_schemas=[db],
        election=False,
        topic_template=f"bench.data.{tag}",
        checkpoints_topic=f"bench.ckpt.{tag}",
        schemas_topic=f"bench.schemas.{tag}",
        partitions=args.partitions,
    )
    reader = Reader(
        SourceConnection(
            name=f"bench_{tag}", host=host, port=int(port), user=args.user, password=args.password
        ),
        settings,
        Services(kafka={"bootstrap.servers": args.kafka}, zookeeper_hosts=None),
    )
    stop = threading.Event()
    marks: dict[str, float] = {}

    def watch() -> None:
        deadline = time.monotonic() + 900
        while not stop.is_set() and time.monotonic() < deadline:
            pos = reader.committed
            if pos is not None and "first" not in marks and reader.metrics.events:
                marks["first"] = time.perf_counter()
            if pos is not None and (pos.file, pos.offset) >= end:
                marks["done"] = time.perf_counter()
                stop.set()
            time.sleep(0.005)
        stop.set()

    profiler = cProfile.Profile() if args.profile else None
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    if profiler:
        profiler.enable()
    reader.run(stop)
    if profiler:
        profiler.disable()
    m = reader.metrics.snapshot()
    result: dict[str, Any] = {
        "rows": m["rows"],
        "seconds": marks.get("done", time.perf_counter()) - marks.get("first", began),
        "total_seconds": marks.get("done", time.perf_counter()) - began,
        "rss_mb": maxrss_mb(),
        "batches": m["batches"],
        "commit_p50_ms": m["commit_latency_p50_ms"],
    }
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        result["profile"] = text.getvalue()
    admin = kafka.admin({"bootstrap.servers": args.kafka})
    admin.delete_topics([f"bench.data.{tag}", f"bench.ckpt.{tag}", f"bench.schemas.{tag}"])
    out.put(result)


def _in_child(target: Any, *a: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*a, out))
    proc.start()
    result: dict[str, Any] = out.get(timeout=1200)
    proc.join(60)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.reader", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--mysql", default="127.0.0.1:13306", help="source server (default: the local stack)"
    )
    parser.add_argument("--user", default="rowbus")
    parser.add_argument("--password", default="rowbus")
    parser.add_argument("--kafka", default="127.0.0.1:19092")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--w1-rows", type=int, default=100_000)
    parser.add_argument("--w2-txns", type=int, default=20_000)
    parser.add_argument(
        "--profile", action="store_true", help="print the reader's hottest functions"
    )
    args = parser.parse_args(argv)
    db = f"bench_{uuid.uuid4().hex[:8]}"
    with _connect(args) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    try:
        for name, writer, size in (("W1", write_w1, args.w1_rows), ("W2", write_w2, args.w2_txns)):
            if not size:
                continue
            began = time.perf_counter()
            start, end, count = writer(args, db, size)
            print(
                f"{name}: wrote {count} {'rows' if name == 'W1' else 'transactions'} "
                f"in {time.perf_counter() - began:.1f}s "
                f"({start[0]}:{start[1]} .. {end[0]}:{end[1]})"
            )
            base = _in_child(baseline, args, db, start, end)
            result = _in_child(run_reader, args, db, start, end)
            base_rate = base["rows"] / base["seconds"]
            rate = result["rows"] / result["seconds"] if result["seconds"] > 0 else 0.0
            print(
                f"  mysql-replication alone: {base['rows']} rows in {base['seconds']:.2f}s = "
                f"{base_rate:,.0f} rows/s, peak RSS {base['rss_mb']:.0f} MB"
            )
            print(
                f"  reader → Kafka committed: {result['rows']} rows in {result['seconds']:.2f}s = "
                f"{rate:,.0f} rows/s ({rate / base_rate:.2f}x the parser alone), "
                f"{result['batches']} batches, commit p50 {result['commit_p50_ms']:.1f} ms, "
                f"start-up {result['total_seconds'] - result['seconds']:.2f}s, "
                f"peak RSS {result['rss_mb']:.0f} MB"
            )
            if "profile" in result:
                print(result["profile"])
    finally:
        with _connect(args) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
