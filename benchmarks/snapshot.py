"""Snapshot benchmark: snapshot rows/s (committed in Kafka) per table and in total, beside a
bare ``SELECT`` stream of the same tables (the ceiling here), and the time from the snapshot's
end to the first streamed change committed.

    python -m benchmarks.snapshot [--mysql HOST:PORT] [--kafka HOST:PORT] [--rows N] [--tables N]
        [--incremental] [--spark-jdbc [--sink HOST:PORT]]

W1-shaped tables (BIGINT PK, INT, BIGINT, VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE,
TINYINT, TEXT, DATE) are filled in bulk; one row per 20 ms is inserted while the snapshot runs,
so streaming has changes waiting when it ends. The bare stream (pymysql reading row by row,
what a Python client gets) is measured before and after the snapshot, each the median of three
(the machine's load moves; the ratio is to their mean); beside it, the snapshot's own native
reading of the table without publishing, and the server's C client printing it to /dev/null
(the server's pace, far above any Python client). `--spark-jdbc`: Spark reads
the same tables itself with partitioned JDBC reads and copies them into a sink (README,
"Snapshots", the choice made from these figures). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pymysql.cursors

from benchmarks.common import connect, maxrss_mb
from rowbus.clients import kafka, mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.producer.snapshot import resultset
from rowbus.producer.snapshot.signals import publish
from rowbus.producer.snapshot.values import (
    CONVERSIONS,
    post_converters,
    row_converter,
    select_expression,
)
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


def _client(args: argparse.Namespace, db: str) -> Any:
    host, port = args.mysql.split(":")
    return mysql.connect(
        host=host,
        port=int(port),
        user=args.user,
        password=args.password,
        database=db,
        conv=CONVERSIONS,
        cursorclass=pymysql.cursors.SSCursor,
    )


def _schema(args: argparse.Namespace, db: str, table: str) -> Any:
    from rowbus.producer.server import SourceServer

    host, port = args.mysql.split(":")
    src = SourceConnection(
        name="bench", host=host, port=int(port), user=args.user, password=args.password
    )
    with SourceServer(src) as server:
        schema = server.catalog.table_schema(db, table)
    assert schema is not None
    return schema


def bare_select(args: argparse.Namespace, db: str, table: str, convert: bool) -> float:
    """rows/s of one unbuffered ``SELECT *`` read row by row by pymysql (with the snapshot's
    value conversion or not): what a Python client gets without rowbus."""
    to_values = row_converter(_schema(args, db, table).columns)
    conn = _client(args, db)
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


def bulk_select(args: argparse.Namespace, db: str, table: str) -> float:
    """rows/s of the snapshot's own reading of the whole table (`resultset.select`, native,
    values converted) without encoding or publishing anything."""
    schema = _schema(args, db, table)
    cols = ", ".join(select_expression(c) for c in schema.columns)
    conn = _client(args, db)
    began = time.perf_counter()
    n = len(
        resultset.select(conn, f"SELECT {cols} FROM `{table}`", [], post_converters(schema.columns))
    )
    took = time.perf_counter() - began
    conn.close()
    return n / took


def client_select(args: argparse.Namespace, db: str, table: str, rows: int) -> float | None:
    """rows/s of the server's C client printing ``SELECT *`` to /dev/null (``--quick``: row by
    row): the server's own pace here; None when no client is installed."""
    binary = shutil.which("mariadb") or shutil.which("mysql")
    if binary is None:
        return None
    host, port = args.mysql.split(":")
    command = [
        binary, f"-h{host}", f"-P{port}", f"-u{args.user}", f"-p{args.password}", "--quick",
        "-N", "-e", f"SELECT * FROM `{db}`.`{table}`",
    ]  # fmt: skip
    began = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True, timeout=600)
    return rows / (time.perf_counter() - began)


def best_of(runs: int, measure: Callable[[], float]) -> float:
    """The median of `runs` measurements (a shared machine's load moves between them)."""
    return statistics.median(measure() for _ in range(runs))


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
    table_first: dict[str, tuple[float, int]] = {}
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
                    if t.rows and name not in table_first:
                        table_first[name] = (time.perf_counter(), t.rows)
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
    # A table's rows over its own span, from its first committed chunk to its last (tables
    # are read `parallelism` at a time, so the spans overlap).
    per_table: dict[str, int] = {}
    for name, table in state.tables.items():
        if name in table_first and name in table_done:
            t0, rows0 = table_first[name]
            per_table[name] = round((table.rows - rows0) / max(1e-3, table_done[name] - t0))
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


def _jdbc_frame(
    spark: Any, args: argparse.Namespace, db: str, name: str, host: str, port: str
) -> Any:
    """`name` read by Spark in `--spark-partitions` ranges of its primary key."""
    with connect(args.mysql, args.user, args.password, db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT MIN(id), MAX(id) FROM `{name}`")
        lo, hi = cur.fetchone()
    return (
        spark.read.format("jdbc")
        .options(
            url=f"jdbc:mysql://{host}:{port}/{db}",
            dbtable=f"`{name}`",
            partitionColumn="id",
            lowerBound=str(lo),
            upperBound=str(int(hi) + 1),
            numPartitions=str(args.spark_partitions),
            fetchsize="10000",
            driver="org.mariadb.jdbc.Driver",
            user=args.user,
            password=args.password,
        )
        .load()
    )


def run_spark_jdbc(args: argparse.Namespace, db: str, names: list[str]) -> dict[str, Any]:
    """Spark reading the same tables itself: partitioned JDBC reads on the executors (Debian's
    MariaDB driver, installed if missing), each table read whole (a ``noop`` write) and copied
    into an empty table of a sink database (JDBC batch inserts). local[2] here: the executors
    share the machine's two cores, as the reader does. Spark's start-up is reported apart."""
    from pyspark.sql import SparkSession

    from rowbus.local.install import ensure_jdbc_driver
    from rowbus.spark_apply.job import local_bind

    jar = ensure_jdbc_driver()
    host, port = args.mysql.split(":")
    sink_host, sink_port = (args.sink or args.mysql).split(":")
    sink_db = f"{db}_sink"
    master = f"local[{args.spark_cores}]"
    began = time.perf_counter()
    spark = (
        SparkSession.builder.master(master)
        .appName("bench-snapshot-jdbc")
        .config(map=dict(local_bind(master)))
        .config("spark.jars", str(jar))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    startup = time.perf_counter() - began
    # The first JDBC job pays for class loading and the JIT (seconds here): one warm-up read
    # of the first table, not timed.
    _jdbc_frame(spark, args, db, names[0], host, port).write.format("noop").mode("overwrite").save()
    common = {
        "driver": "org.mariadb.jdbc.Driver",
        "user": args.user,
        "password": args.password,
    }
    read_rates: dict[str, int] = {}
    copy_rates: dict[str, int] = {}
    read_s = copy_s = 0.0
    rows = 0
    sink = f"{sink_host}:{sink_port}"
    with connect(sink, args.user, args.password) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{sink_db}`")
        for name in names:
            cur.execute(W1_DDL.format(name=f"`{sink_db}`.`{name}`"))
    try:
        for name in names:
            with connect(args.mysql, args.user, args.password, db) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM `{name}`")
                (count,) = cur.fetchone()
            frame = _jdbc_frame(spark, args, db, name, host, port)
            t0 = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            t1 = time.perf_counter()
            frame.write.format("jdbc").options(
                url=f"jdbc:mysql://{sink}/{sink_db}?rewriteBatchedStatements=true",
                dbtable=f"`{name}`",
                batchsize="5000",
                **common,
            ).mode("append").save()
            t2 = time.perf_counter()
            read_rates[name] = round(count / (t1 - t0))
            copy_rates[name] = round(count / (t2 - t1))
            read_s += t1 - t0
            copy_s += t2 - t1
            rows += int(count)
        with connect(sink, args.user, args.password, sink_db) as conn, conn.cursor() as cur:
            copied = 0
            for name in names:
                cur.execute(f"SELECT COUNT(*) FROM `{name}`")
                copied += int(cur.fetchone()[0])
        assert copied == rows, f"the JDBC copy wrote {copied} rows of {rows}"
    finally:
        spark.stop()
        with connect(sink, args.user, args.password) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{sink_db}`")
    return {
        "rows": rows,
        "spark_startup_s": round(startup, 1),
        "read_rows_per_s": round(rows / read_s),
        "copy_rows_per_s": round(rows / copy_s),
        "per_table_read_rows_per_s": read_rates,
        "per_table_copy_rows_per_s": copy_rates,
    }


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
    parser.add_argument(
        "--spark-jdbc",
        action="store_true",
        help="also Spark reading the tables itself (partitioned JDBC) and copying them to a sink",
    )
    parser.add_argument("--sink", default=None, help="HOST:PORT of the copy (default: --mysql)")
    parser.add_argument("--spark-cores", type=int, default=2)
    parser.add_argument("--spark-partitions", type=int, default=4)
    args = parser.parse_args(argv)
    db = f"bench_{uuid.uuid4().hex[:8]}"
    with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    try:
        names = fill(args, db)

        def bare() -> float:
            return best_of(3, lambda: bare_select(args, db, names[0], convert=False))

        before = bare()
        converted = best_of(3, lambda: bare_select(args, db, names[0], convert=True))
        bulk = best_of(3, lambda: bulk_select(args, db, names[0]))
        client = client_select(args, db, names[0], args.rows)
        result = run_snapshot(args, db, names)
        print(f"snapshot: {result}")
        # The load of a shared machine moves: the bare stream again right after, and the
        # ratio taken to the mean of both.
        after = bare()
        raw = (before + after) / 2
        rate = result["rows_per_s"]
        print(
            f"bare SELECT of {names[0]} (pymysql row by row, median of 3) before / after the "
            f"snapshot: {before:,.0f} / {after:,.0f} rows/s; with value conversion "
            f"{converted:,.0f}; the snapshot's own reading alone (native, converted) "
            f"{bulk:,.0f}; the server's C client to /dev/null "
            + (f"{client:,.0f}" if client else "(not installed)")
        )
        print(
            f"snapshot / bare SELECT (mean of before and after): {rate / raw:.0%}; "
            f"/ converted SELECT: {rate / converted:.0%}; / its own reading alone: "
            f"{rate / bulk:.0%}" + (f"; / the C client: {rate / client:.0%}" if client else "")
        )
        if args.spark_jdbc:
            jdbc = run_spark_jdbc(args, db, names)
            print(f"Spark partitioned JDBC: {jdbc}")
            rate = result["rows_per_s"]
            print(
                f"Spark JDBC read / reader snapshot: {jdbc['read_rows_per_s'] / rate:.2f}; "
                f"Spark JDBC copy to the sink / reader snapshot: "
                f"{jdbc['copy_rows_per_s'] / rate:.2f}"
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
