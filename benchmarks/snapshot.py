"""Snapshot benchmark: snapshot rows/s (committed in Kafka) per table and in total, beside a
bare ``SELECT`` stream of the same tables (the ceiling here), and the time from the snapshot's
end to the first streamed change committed.

    python -m benchmarks.snapshot [--mysql HOST:PORT] [--kafka HOST:PORT] [--rows N] [--tables N]

W1-shaped tables (BIGINT PK, INT, BIGINT, VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE,
TINYINT, TEXT, DATE) are filled in bulk; one row per 20 ms is inserted while the snapshot runs,
so streaming has changes waiting when it ends. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

import pymysql.cursors

from benchmarks.common import connect, maxrss_mb
from rowbus.clients import kafka, mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.producer.snapshot.signals import publish
from rowbus.producer.snapshot.values import CONVERSIONS, row_converter
from rowbus.workloads import W1_DDL


def fill(args: argparse.Namespace, db: str) -> list[str]:
    names = [f"w1_{i}" for i in range(args.tables)]
    with connect(args.mysql, args.user, args.password, db) as conn, conn.cursor() as cur:
        for name in names:
            cur.execute(W1_DDL.format(name=f"`{db}`.`{name}`"))
            cur.execute(
                f"INSERT INTO `{name}` SELECT seq, seq % 100000, seq * 7919, "
                "CONCAT('name-', seq, '-', MD5(seq)), (seq % 1000000) / 100, "
                "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq / 7, seq % 100, "
                "REPEAT('x', 40), DATE'2024-01-01' + INTERVAL (seq % 1000) DAY "
                f"FROM seq_1_to_{args.rows}"
            )
    return names


def bare_select(args: argparse.Namespace, db: str, table: str, convert: bool) -> float:
    """rows/s of one unbuffered ``SELECT *`` (with the snapshot's value conversion or not)."""
    host, port = args.mysql.split(":")
    conn = mysql.connect(
        host=host,
        port=int(port),
        user=args.user,
        password=args.password,
        database=db,
        conv=CONVERSIONS,
        cursorclass=pymysql.cursors.SSCursor,
    )
    from rowbus.producer.server import SourceServer

    src = SourceConnection(
        name="bench", host=host, port=int(port), user=args.user, password=args.password
    )
    with SourceServer(src) as server:
        schema = server.table_schema(db, table)
    assert schema is not None
    to_values = row_converter(schema.columns)
    began = time.perf_counter()
    n = 0
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        for row in cur:
            if convert:
                to_values(row)
            n += 1
    conn.close()
    return n / (time.perf_counter() - began)


def run_snapshot(args: argparse.Namespace, db: str, names: list[str]) -> dict[str, Any]:
    host, port = args.mysql.split(":")
    tag = uuid.uuid4().hex[:8]
    topics = [f"bench.data.{tag}", f"bench.ckpt.{tag}", f"bench.schemas.{tag}"]
    settings = ReaderSettings(
        snapshot="initial",
        snapshot_chunk_rows=args.chunk_rows,
        snapshot_parallelism=args.parallelism,
        include_schemas=[db],
        election=False,
        topic_template=topics[0],
        checkpoints_topic=topics[1],
        schemas_topic=topics[2],
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
    table_done: dict[str, float] = {}

    def trickle() -> None:
        with connect(args.mysql, args.user, args.password, db) as conn, conn.cursor() as cur:
            key = 10**12
            while not stop.is_set() and key < 10**12 + 100_000:
                cur.execute(f"INSERT INTO `{names[0]}` (id, i) VALUES (%s, 1)", (key,))
                key += 1
                stop.wait(0.02)

    def watch() -> None:
        deadline = time.monotonic() + 1800
        while not stop.is_set() and time.monotonic() < deadline:
            state = reader.snapshot
            if state is not None:
                marks.setdefault("first", time.perf_counter())
                for name, t in state.tables.items():
                    if t.done and name not in table_done:
                        table_done[name] = time.perf_counter()
                if state.done and "done" not in marks:
                    marks["done"] = time.perf_counter()
                    marks["streamed_before"] = reader.metrics.transactions
            if "done" in marks and reader.metrics.transactions > marks["streamed_before"]:
                marks["streamed"] = time.perf_counter()
                stop.set()
            time.sleep(0.002)
        stop.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (trickle, watch)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    reader.run(stop)
    state = reader.snapshot
    assert state is not None
    start = marks.get("first", began)
    per_table = {
        name: round(t.rows / (table_done.get(name, time.perf_counter()) - start))
        for name, t in state.tables.items()
    }
    seconds = marks.get("done", time.perf_counter()) - start
    kafka.admin({"bootstrap.servers": args.kafka}).delete_topics(topics)
    return {
        "rows": state.seq,
        "seconds": round(seconds, 2),
        "rows_per_s": round(state.seq / seconds),
        "per_table_rows_per_s": per_table,
        "end_to_first_streamed_ms": round(1000 * (marks["streamed"] - marks["done"]), 1)
        if "streamed" in marks
        else None,
        "rss_mb": round(maxrss_mb()),
    }


def run_incremental(args: argparse.Namespace, db: str, names: list[str]) -> dict[str, Any]:
    """rows/s of an incremental snapshot (`rowbus snapshot` of every table) by a reader that
    streams with `snapshot: never`, while one row per 20 ms is inserted."""
    host, port = args.mysql.split(":")
    tag = uuid.uuid4().hex[:8]
    topics = [f"bench.data.{tag}", f"bench.ckpt.{tag}", f"bench.schemas.{tag}"]
    signals = f"bench.signals.{tag}"
    client = {"bootstrap.servers": args.kafka}
    kafka.ensure_topic(kafka.admin(client), signals, 1, {})
    settings = ReaderSettings(
        snapshot="never",
        start="latest",
        signal_topic=signals,
        snapshot_chunk_rows=args.chunk_rows,
        include_schemas=[db],
        election=False,
        topic_template=topics[0],
        checkpoints_topic=topics[1],
        schemas_topic=topics[2],
        partitions=args.partitions,
    )
    source = f"bench_{tag}"
    reader = Reader(
        SourceConnection(
            name=source, host=host, port=int(port), user=args.user, password=args.password
        ),
        settings,
        Services(kafka=client, zookeeper_hosts=None),
    )
    stop = threading.Event()
    marks: dict[str, float] = {}

    def drive() -> None:
        deadline = time.monotonic() + 600
        while not stop.is_set() and reader.metrics.events == 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)  # until the reader streams
        publish(client, signals, source, [f"{db}.{n}" for n in names])
        marks["asked"] = time.perf_counter()
        with connect(args.mysql, args.user, args.password, db) as conn, conn.cursor() as cur:
            key = 2 * 10**12  # past the keys the initial snapshot's trickle inserted
            while not stop.is_set() and time.monotonic() < deadline:
                cur.execute(f"INSERT INTO `{names[0]}` (id, i) VALUES (%s, 1)", (key,))
                key += 1
                stop.wait(0.02)
                state = reader.snapshot
                if state is not None and state.backfills:
                    marks.setdefault("first", time.perf_counter())
                    if all(b.done for b in state.backfills.values()):
                        marks["done"] = time.perf_counter()
                        marks["rows"] = sum(b.rows for b in state.backfills.values())
                        stop.set()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    reader.run(stop)
    stop.set()
    thread.join(30)
    kafka.admin(client).delete_topics([*topics, signals])
    seconds = marks.get("done", time.perf_counter()) - marks.get("asked", 0.0)
    rows = int(marks.get("rows", 0))
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.snapshot", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mysql", default="127.0.0.1:13306")
    parser.add_argument("--user", default="rowbus")
    parser.add_argument("--password", default="rowbus")
    parser.add_argument("--kafka", default="127.0.0.1:19092")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000, help="rows per table")
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument(
        "--incremental", action="store_true", help="also an incremental snapshot while streaming"
    )
    args = parser.parse_args(argv)
    db = f"bench_{uuid.uuid4().hex[:8]}"
    with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    try:
        names = fill(args, db)
        raw = bare_select(args, db, names[0], convert=False)
        converted = bare_select(args, db, names[0], convert=True)
        print(
            f"bare SELECT of {names[0]}: {raw:,.0f} rows/s; with value conversion {converted:,.0f}"
        )
        result = run_snapshot(args, db, names)
        print(f"snapshot: {result}")
        print(
            f"snapshot / bare SELECT: {result['rows_per_s'] / raw:.0%} "
            f"(/ converted SELECT: {result['rows_per_s'] / converted:.0%})"
        )
        if args.incremental:
            inc = run_incremental(args, db, names)
            print(f"incremental snapshot while streaming: {inc}")
    finally:
        with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
