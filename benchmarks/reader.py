"""Reader benchmark: rows/s from binlog to committed in Kafka, beside the raw parse rate.

    python -m benchmarks.reader [--mysql HOST:PORT] [--kafka HOST:PORT] [--w1-rows N]
        [--w1u-rows N] [--w2-txns N] [--producer KEY=VALUE ...] [--no-pure] [--no-compressed]
        [--profile] [--mysql8-primary]

W1: a 10-column table (BIGINT PK, INT, BIGINT, VARCHAR(64), DECIMAL(12,2), DATETIME(6), DOUBLE,
TINYINT, TEXT, DATE) filled in 100-row transactions. W1z: the same rows into a second such table
with MariaDB's ``log_bin_compress=ON`` and ``log_bin_compress_min_len=10`` (both restored
after), read by the reader only (mysql-replication alone drops compressed events, so
W1z's ratios are to W1's parse, and each reader figure is also given beside W1's on the same path,
compression off, in the same run). W1u: single-row UPDATEs of that table, one
per transaction (Debezium's harness in ../shared/bench/debezium/ uses the same two phases). W2:
8 tables, single-row transactions, 60% update / 20% insert / 20% delete. For each, the binlog
range is written first, then read: by mysql-replication alone (every value touched: the
baseline), by the reader on its native fast path (`rowbus.producer.fastrows`), and by the reader
on the pure-Python fallback (`--no-pure` leaves that out); the reader runs start at the range and
stop when the checkpoint passes the end. Each read is a fresh process, so its peak RSS is its
own. `--producer` overrides a librdkafka producer setting of the reader (linger.ms,
batch.num.messages, compression.type, ...). `--profile` prints the native reader's top functions.

Debezium: where java and javac are on PATH, W1 and W1u are also read by Debezium 3.6's embedded
MySQL connector (../shared/bench/debezium/run.sh, `--no-load` from the same start positions,
after the reader, never beside it). Its harness counts the rows of `bench.w1`, so the benchmark
then writes into the database `bench` (it must not exist yet; `--db` names another, which leaves
Debezium out). Each phase is measured twice (`--cores both`, the default): pinned, every
measured process (the baseline, the reader, the JVM through run.sh `--cpus`) on the one core
`--pin CPU` names (default 1), so ratios compare one core with one core; then unpinned, all
cores, where the reader's Kafka client threads (and Debezium's) run beside its main thread.
Each reader figure is given with its ratio to the baseline measured the same way in the same
run. W1 and W1u are also read by the reader with ``reader.encoding: debezium`` (Debezium's JSON,
schemas on), and by Debezium with JsonConverter beside its Connect-struct run, the pair that
does the same work (`--no-debezium-encoding` leaves both out). `--cores 1` or `--cores 2`
measures one way only. Not a test: nothing is asserted.

`--mysql8-primary`: no source server is used (nor `--mysql`). W1's rows (`--w1-rows`, the same
seeded values) are laid out as a MySQL 8.4 binlog twice, with ``binlog_transaction_compression``
OFF and ON (each 100-row transaction one zstd Transaction_payload event), each served by the
loopback MySQL 8.4 test primary (`tests.mysql8`, in this process) to the reader in a child
process, native path (and pure-Python unless `--no-pure`), with `--pin` as above; the figures
are rows per CPU-second of the reader's process (the primary's CPU is this process's) and the
ratio of ON to OFF in the same run. mysql-replication alone cannot read Transaction_payload
events, so there is no bare parse here.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import os
import pstats
import random
import re
import shutil
import subprocess
import threading
import time
import uuid
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from benchmarks.common import binlog_end, connect, maxrss_mb
from rowbus.clients import kafka
from rowbus.clients.settings import SourceConnection
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.workloads import W1, W1_DDL, W2, w1_row

# rowbus.producer.reader (hence binlog, fastrows, tablemaps) is imported by `run_reader` only:
# importing it patches mysql-replication (values.install, tablemaps.install), and the baseline
# process must parse with the library as it is.


def _harness() -> str:
    """The shared harness: ``shared/bench/debezium/run.sh`` in the nearest folder above the
    checkout that has one (a worktree sits deeper than the main checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for _ in range(6):
        here = os.path.dirname(here)
        found = os.path.join(here, "shared", "bench", "debezium", "run.sh")
        if os.path.exists(found):
            return found
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(os.path.dirname(checkout), "shared", "bench", "debezium", "run.sh")


DEBEZIUM = _harness()
"""Where the harness is (override: ROWBUS_DEBEZIUM_RUN or --debezium)."""


def _pin(args: argparse.Namespace) -> None:
    if args.pin:
        os.sched_setaffinity(0, {int(c) for c in args.pin.split(",")})


def debezium_missing(args: argparse.Namespace) -> str | None:
    """Why Debezium cannot run here (None: it can)."""
    if args.no_debezium:
        return "--no-debezium"
    if not (shutil.which("java") and shutil.which("javac")):
        return "java/javac are not installed"
    if not os.path.exists(args.debezium):
        return f"no harness at {args.debezium}"
    return None


def run_debezium(
    args: argparse.Namespace, phase: str, start: tuple[str, int], rows: int, fmt: str = "connect"
) -> dict[str, str]:
    """One phase of the Debezium harness from `start` until it has counted `rows` rows;
    `fmt`: ``connect`` (Connect structs) or ``json`` (serialised by JsonConverter)."""
    flag = "--w1-start" if phase == "W1" else "--w1u-start"
    size = "--w1-rows" if phase == "W1" else "--w1u-rows"
    cmd = [args.debezium, args.mysql, "--no-load", "--phases", phase, flag]
    cmd += [f"{start[0]}:{start[1]}", size, str(rows), "--user", args.user]
    cmd += ["--server-id", str(4_100_000 + random.randint(0, 10**5)), "--timeout", "600"]
    cmd += ["--format", fmt]
    if args.pin:
        cmd += ["--cpus", args.pin]
    env = {**os.environ, "DBZ_PASSWORD": args.password}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(f"debezium {phase} "):
            return dict(f.split("=", 1) for f in line.split()[2:])
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return {"status": f"failed (exit {done.returncode}): {tail}"}


def _debezium(
    args: argparse.Namespace, name: str, start: tuple[str, int], count: int, reader_rate: float
) -> str:
    """Runs Debezium on the phase's range, prints its figures; the summary's part."""
    dbz = run_debezium(args, name, start, count)
    if dbz.get("status") != "ok":
        print(f"  Debezium: {dbz.get('status')}")
        return f" | Debezium {dbz.get('status')}"
    rate = float(dbz["rows_per_s"])
    print(
        f"  Debezium 3.6 embedded (counting Connect structs, no Kafka): {dbz['rows']} rows in "
        f"{dbz['seconds']}s = {rate:,.0f} rows/s, cpu {dbz['cpu_s']}s, start-up "
        f"{dbz['startup_s']}s, peak RSS {dbz['peak_rss_mb']} MB"
    )
    per_cpu = int(dbz["rows"]) / max(float(dbz["cpu_s"]), 1e-9)
    line = (
        f" | Debezium {rate:,.0f} ({per_cpu:,.0f}/CPU-s; reader native / Debezium: "
        f"{reader_rate / rate:.2f}x)"
    )
    if args.debezium_encoding:
        # Debezium writing what the debezium encoding writes: JsonConverter, schemas on.
        dbz = run_debezium(args, name, start, count, "json")
        if dbz.get("status") != "ok":
            print(f"  Debezium with JsonConverter: {dbz.get('status')}")
            return line + f" | Debezium json {dbz.get('status')}"
        rate = float(dbz["rows_per_s"])
        print(
            f"  Debezium 3.6 embedded with JsonConverter (schemas on, no Kafka): {dbz['rows']} "
            f"rows in {dbz['seconds']}s = {rate:,.0f} rows/s, cpu {dbz['cpu_s']}s, peak RSS "
            f"{dbz['peak_rss_mb']} MB"
        )
        per_cpu = int(dbz["rows"]) / max(float(dbz["cpu_s"]), 1e-9)
        line += f" | Debezium json {rate:,.0f} ({per_cpu:,.0f}/CPU-s)"
    return line


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


def write_w1z(
    args: argparse.Namespace, db: str, rows: int
) -> tuple[tuple[str, int], tuple[str, int], int]:
    """W1's rows into table `w1z` with log_bin_compress=ON (MariaDB), restored after. The
    threshold is 10 bytes: MariaDB compresses a rows event or not by its first row's size, and
    a W1 row is under the default 256."""
    with _connect(args) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.log_bin_compress, @@GLOBAL.log_bin_compress_min_len")
        row = cur.fetchone()
        was = row if row else ("OFF", 256)
        cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
        cur.execute("SET GLOBAL log_bin_compress = ON")
    try:
        # A new session: MariaDB reads log_bin_compress per session at connect.
        workload = W1(db, table="w1z")
        with _connect(args, db) as conn:
            workload.create(conn)
            start = binlog_end(conn)
            conn.autocommit(False)
            written = sum(workload.step(conn) for _ in range(rows // workload.rows_per_txn))
            conn.autocommit(True)
            end = binlog_end(conn)
    finally:
        with _connect(args) as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL log_bin_compress = %s", (was[0],))
            cur.execute("SET GLOBAL log_bin_compress_min_len = %s", (was[1],))
    return start, end, written


def write_w1u(
    args: argparse.Namespace, db: str, rows: int
) -> tuple[tuple[str, int], tuple[str, int], int]:
    """`rows` single-row UPDATEs of W1's table, one per transaction (autocommit), over keys
    0..n-1 of the W1 rows written before (`--w1-rows` of them)."""
    keys = max(1, args.w1_rows)
    with _connect(args, db) as conn:
        start = binlog_end(conn)
        with conn.cursor() as cur:
            for chunk in range(0, rows, 10_000):
                cur.executemany(
                    "UPDATE w1 SET i = i + 1, s = %s WHERE id = %s",
                    [(f"u{n}", n % keys) for n in range(chunk, min(rows, chunk + 10_000))],
                )
        end = binlog_end(conn)
    return start, end, rows


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
    _pin(args)
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
    cpu = time.process_time()
    for event in stream:
        for row in event.rows:
            for image in row.values():
                for _ in image.values():
                    pass
            rows += 1
        if (stream.log_file, stream.log_pos) >= end:
            break
    seconds = time.perf_counter() - began
    cpu = time.process_time() - cpu
    stream.close()
    out.put({"rows": rows, "seconds": seconds, "cpu_s": cpu, "rss_mb": maxrss_mb()})


def run_reader(
    args: argparse.Namespace,
    db: str,
    start: tuple[str, int],
    end: tuple[str, int],
    native: bool,
    out: Any,
    framed: bool = True,
    encoding: str = "protobuf",
) -> None:
    from rowbus.producer import binlog, dumpframes, fastrows, tablemaps
    from rowbus.producer.reader import Reader

    _pin(args)
    binlog.FRAMED = framed
    if not native:
        fastrows.set_native(False)
        tablemaps.install(enabled=False)
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
        encoding=encoding,
        **({"debezium": {"topic_prefix": f"bench.dbz.{tag}"}} if encoding == "debezium" else {}),
    )
    reader = Reader(
        SourceConnection(
            name=f"bench_{tag}", host=host, port=int(port), user=args.user, password=args.password
        ),
        settings,
        Services(
            kafka={
                "bootstrap.servers": args.kafka,
                **dict(kv.split("=", 1) for kv in args.producer),
            },
            zookeeper_hosts=None,
        ),
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

    profiler = cProfile.Profile() if args.profile and native and framed else None
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    cpu = time.process_time()
    if profiler:
        profiler.enable()
    reader.run(stop)
    if profiler:
        profiler.disable()
    cpu = time.process_time() - cpu
    m = reader.metrics.readings()
    result: dict[str, Any] = {
        "rows": m["rows"],
        "seconds": marks.get("done", time.perf_counter()) - marks.get("first", began),
        "total_seconds": marks.get("done", time.perf_counter()) - began,
        "rss_mb": maxrss_mb(),
        "cpu_s": cpu,
        "batches": m["batches"],
        "commit_p50_ms": m["commit_latency_p50_ms"],
        "native_events": fastrows.Counts.native,
        "fallback_events": fastrows.Counts.fallback,
        "table_maps": f"{tablemaps.Stats.parsed} parsed, {tablemaps.Stats.reused} reused",
        "framed": dumpframes.Stats.packets,
    }
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        result["profile"] = text.getvalue()
    admin = kafka.admin({"bootstrap.servers": args.kafka})
    written = [f"bench.data.{tag}", f"bench.ckpt.{tag}", f"bench.schemas.{tag}"]
    if encoding == "debezium":  # a topic per table, the heartbeat topic, the DDL topic
        names = admin.list_topics(timeout=15).topics
        written += [t for t in names if f"bench.dbz.{tag}" in t]
    admin.delete_topics(written)
    out.put(result)


def _in_child(target: Any, *a: Any, **kw: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*a, out), kwargs=kw)
    proc.start()
    result: dict[str, Any] = out.get(timeout=1200)
    proc.join(60)
    return result


def replace_pin(args: argparse.Namespace, pin: str) -> argparse.Namespace:
    """`args` with every measured process pinned to `pin` ('' for none)."""
    return argparse.Namespace(**{**vars(args), "pin": pin})


def _cores(args: argparse.Namespace) -> str:
    return f"pinned to CPU {args.pin}" if args.pin else f"unpinned ({os.cpu_count()} CPUs)"


def _measure(
    args: argparse.Namespace,
    name: str,
    db: str,
    start: tuple[str, int],
    end: tuple[str, int],
    missing: str | None,
    seen: dict[tuple[str, str, str], Any],
) -> str:
    """The phase's binlog range read by the bare parse, the reader(s) and Debezium, with
    `args.pin`; prints each and returns the phase's summary line. `seen` keeps each phase's
    figures by (phase, pin, what): W1z takes W1's parse and sets its readers beside W1's."""
    print(f"  {_cores(args)}:")
    if name == "W1z" and ("W1", args.pin, "parse") in seen:
        base = seen["W1", args.pin, "parse"]
        print("  mysql-replication alone cannot read compressed events: W1's parse stands")
    else:
        base = _in_child(baseline, args, db, start, end)
        print(
            f"  mysql-replication alone: {base['rows']} rows in {base['seconds']:.2f}s = "
            f"{base['rows'] / base['seconds']:,.0f} rows/s, "
            f"{base['rows'] / base['cpu_s']:,.0f} rows per CPU-s, peak RSS {base['rss_mb']:.0f} MB"
        )
    seen[name, args.pin, "parse"] = base
    base_rate = base["rows"] / base["seconds"]
    base_cpu_rate = base["rows"] / base["cpu_s"]
    cores = "1 core" if args.pin else "all cores"
    line = f"{name} {cores}: parse {base_rate:,.0f} ({base_cpu_rate:,.0f}/CPU-s)"
    rate_native = 0.0
    runs = [(True, True)]
    if args.library_framing:
        runs.append((True, False))
    if not args.no_pure:
        runs.append((False, False))
    for native, framed in runs:
        result = _in_child(run_reader, args, db, start, end, native, framed=framed)
        rate = result["rows"] / result["seconds"] if result["seconds"] > 0 else 0.0
        cpu_rate = result["rows"] / result["cpu_s"]
        label = "pure" if not native else "native" if framed else "native+lib-framing"
        print(
            f"  reader ({label}) → Kafka committed: {result['rows']} rows in "
            f"{result['seconds']:.2f}s = {rate:,.0f} rows/s ({rate / base_rate:.2f}x the "
            f"parser alone), {result['batches']} batches, commit p50 "
            f"{result['commit_p50_ms']:.1f} ms, {cpu_rate:,.0f} rows per CPU-s "
            f"(start-up included), start-up "
            f"{result['total_seconds'] - result['seconds']:.2f}s, peak RSS "
            f"{result['rss_mb']:.0f} MB, rows events native/fallback "
            f"{result['native_events']}/{result['fallback_events']}, table maps "
            f"{result['table_maps']}, {result['framed']} events framed by dumpframes"
        )
        if native and framed:
            rate_native = rate
        seen[name, args.pin, label] = rate
        line += (
            f" | {label} {rate:,.0f} ({rate / base_rate:.2f}x; {cpu_rate:,.0f}/CPU-s, "
            f"{cpu_rate / base_cpu_rate:.2f}x)"
        )
        plain = seen.get(("W1", args.pin, label)) if name == "W1z" else None
        if plain:
            line += f" [{rate / plain:.2f} of W1 uncompressed]"
        if "profile" in result:
            print(result["profile"])
    if args.debezium_encoding and name in ("W1", "W1u"):
        # The same range published in the debezium encoding (Debezium's JSON, schemas on).
        result = _in_child(run_reader, args, db, start, end, True, encoding="debezium")
        rate = result["rows"] / result["seconds"] if result["seconds"] > 0 else 0.0
        cpu_rate = result["rows"] / result["cpu_s"]
        print(
            f"  reader (native, debezium encoding) → Kafka committed: {result['rows']} rows in "
            f"{result['seconds']:.2f}s = {rate:,.0f} rows/s ({rate / base_rate:.2f}x the parser "
            f"alone, {rate / rate_native if rate_native else 0:.2f}x the protobuf encoding), "
            f"{cpu_rate:,.0f} rows per CPU-s (start-up included), peak RSS "
            f"{result['rss_mb']:.0f} MB"
        )
        line += f" | debezium-encoding {rate:,.0f} ({cpu_rate:,.0f}/CPU-s)"
    if missing is None and name in ("W1", "W1u"):
        # The rows the bare parse found in the range (an UPDATE that changes nothing
        # writes no row): Debezium waits for exactly that many.
        line += _debezium(args, name, start, base["rows"], rate_native)
    return line


def w1_binlogs(rows: int, db: str) -> list[tuple[str, Any, dict[str, str]]]:
    """W1's rows as MySQL 8.4 binlogs: (label, binlog, server variables) with
    binlog_transaction_compression OFF, then ON."""
    from tests.mysql8.binlog import Binlog, Change, Table, Transaction
    from tests.mysql8.payload import compressing
    from tests.mysql8.rows import column

    ddl = W1_DDL.format(name=f"`{db}`.`w1`")
    listed = ddl[ddl.index("(") + 1 : ddl.rindex(")")].replace("\n", " ")
    parts = [p.strip() for p in re.split(r",\s*(?![^()]*\))", listed)]
    columns = [column(p.split()[0], p.split(" ", 1)[1], primary="PRIMARY" in p) for p in parts]
    out = []
    for label, compression in (("OFF", None), ("ON", compressing())):
        log = Binlog(compression=compression)
        table = Table(db, "w1", columns, table_id=70)
        log.add([Transaction(ddl=f"CREATE DATABASE `{db}`"), Transaction(ddl=ddl, schema=db)])
        rng = random.Random(1)  # W1's seed: the same values as on a real source
        txns = []
        for first in range(1, rows + 1, 100):
            keys = range(first, min(rows + 1, first + 100))
            txns.append(Transaction([Change(table, None, w1_row(rng, k)) for k in keys]))
        log.add(txns)
        out.append((label, log, {"binlog_transaction_compression": label}))
    return out


def mysql8_main(args: argparse.Namespace) -> int:
    """`--mysql8-primary`: W1 with binlog_transaction_compression OFF beside ON, read from the
    MySQL 8.4 test primary; prints each reader run and a summary."""
    from tests.mysql8.primary import Primary

    db = f"bench_{uuid.uuid4().hex[:8]}"
    began = time.perf_counter()
    binlogs = w1_binlogs(args.w1_rows, db)
    print(
        f"W1 as MySQL 8.4 binlogs ({args.w1_rows} rows): built in "
        f"{time.perf_counter() - began:.1f}s; "
        + ", ".join(
            f"compression {label}: {log.current[1] / 1e6:.1f} MB" for label, log, _ in binlogs
        )
    )
    with open("/proc/loadavg") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}; {_cores(args)}")
    paths = [(True, "native")] + ([] if args.no_pure else [(False, "pure")])
    rates: dict[tuple[str, str], float] = {}
    for label, log, variables in binlogs:
        with Primary(log, user=args.user, password=args.password, variables=variables) as server:
            run = argparse.Namespace(**{**vars(args), "mysql": f"127.0.0.1:{server.port}"})
            end = log.current
            for native, path in paths:
                result = _in_child(run_reader, run, db, ("binlog.000001", 4), end, native)
                cpu_rate = result["rows"] / result["cpu_s"]
                rates[label, path] = cpu_rate
                print(
                    f"  compression {label}, reader ({path}) → Kafka committed: "
                    f"{result['rows']} rows, {result['cpu_s']:.2f} CPU-s = {cpu_rate:,.0f} rows "
                    f"per CPU-s (start-up included), {result['seconds']:.2f}s wall, peak RSS "
                    f"{result['rss_mb']:.0f} MB, rows events native/fallback "
                    f"{result['native_events']}/{result['fallback_events']}"
                )
    print("summary (rows per CPU-second of the reader's process, same run):")
    for _, path in paths:
        off, on = rates["OFF", path], rates["ON", path]
        print(f"  W1 MySQL 8.4 {path}: compression OFF {off:,.0f}, ON {on:,.0f} ({on / off:.2f}x)")
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")
    return 0


def _parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--w1u-rows", type=int, default=200_000)
    parser.add_argument("--w2-txns", type=int, default=20_000)
    parser.add_argument(
        "--producer",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting for the reader's producer (repeatable)",
    )
    parser.add_argument(
        "--no-pure", action="store_true", help="skip the reader run on the pure-Python path"
    )
    parser.add_argument(
        "--library-framing",
        action="store_true",
        help="also run the native reader on mysql-replication's framing (the step before)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="print the reader's hottest functions"
    )
    parser.add_argument(
        "--pin", default="1", help="the CPUs of the pinned runs ('' for unpinned runs only)"
    )
    parser.add_argument(
        "--cores",
        choices=("1", "2", "both"),
        default="both",
        help="measure pinned (1), unpinned (2), or each phase both ways (default)",
    )
    parser.add_argument(
        "--no-compressed",
        dest="compressed",
        action="store_false",
        help="leave out W1z (W1 with log_bin_compress=ON; MariaDB sources only)",
    )
    parser.add_argument("--no-debezium", action="store_true", help="leave Debezium out")
    parser.add_argument(
        "--no-debezium-encoding",
        dest="debezium_encoding",
        action="store_false",
        help="leave out the reader runs of W1 and W1u with reader.encoding: debezium",
    )
    parser.add_argument(
        "--debezium",
        default=os.environ.get("ROWBUS_DEBEZIUM_RUN", DEBEZIUM),
        help="the Debezium harness's run.sh",
    )
    parser.add_argument("--db", help="database to write into (default: bench, or a fresh one)")
    parser.add_argument(
        "--mysql8-primary",
        action="store_true",
        help="W1 from the MySQL 8.4 test primary, binlog_transaction_compression OFF beside ON "
        "(no source server)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.mysql8_primary:
        return mysql8_main(args)
    missing = debezium_missing(args)
    db = args.db or ("bench" if missing is None else f"bench_{uuid.uuid4().hex[:8]}")
    with _connect(args) as conn, conn.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE %s", (db,))
        if cur.fetchone() is not None:
            parser.error(f"database {db} exists already (drop it, or name another with --db)")
        cur.execute(f"CREATE DATABASE {db}")
    if db != "bench" and missing is None:
        missing = f"Debezium's harness counts bench.w1, and this run writes {db}"
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    pins = [args.pin] if args.cores == "1" else [""] if args.cores == "2" else [args.pin, ""]
    pins = list(dict.fromkeys(pins))  # --pin '' with --cores both: the unpinned runs once
    ways = " then ".join(_cores(replace_pin(args, p)) for p in pins)
    print(f"load average before: {load}; each phase {ways}")
    try:
        phases = (
            ("W1", write_w1, args.w1_rows, "rows"),
            ("W1z", write_w1z, args.w1_rows if args.compressed else 0, "rows, compressed"),
            ("W1u", write_w1u, args.w1u_rows, "single-row updates"),
            ("W2", write_w2, args.w2_txns, "transactions"),
        )
        summary: list[str] = []
        seen: dict[tuple[str, str, str], Any] = {}
        for name, writer, size, unit in phases:
            if not size or (name == "W1u" and not args.w1_rows):
                continue
            began = time.perf_counter()
            start, end, count = writer(args, db, size)
            mb = f", {(end[1] - start[1]) / 1e6:.1f} MB of binlog" if start[0] == end[0] else ""
            print(
                f"{name}: wrote {count} {unit} in {time.perf_counter() - began:.1f}s "
                f"({start[0]}:{start[1]} .. {end[0]}:{end[1]}{mb})"
            )
            for pin in pins:
                summary.append(
                    _measure(replace_pin(args, pin), name, db, start, end, missing, seen)
                )
        print(
            "summary (rows/s committed in Kafka, wall clock and per CPU-second of the process; "
            "ratios to the bare parse of the same binlog):"
        )
        for line in summary:
            print("  " + line)
        if missing is not None:
            print(f"  Debezium not run: {missing}")
        with open("/proc/loadavg") as f:
            print(f"load average after: {' '.join(f.read().split()[:3])}")
    finally:
        with _connect(args) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
