"""Bounded memory: peak RSS of the reader, a Subscriber and the Spark apply job under a huge
upstream transaction and under a stalled lane.

    python -m benchmarks.bounded [--mysql H:P] [--mysql2 H:P] [--sink H:P] [--kafka H:P]
                                 [--rows N] [--stall-s S] [--w2-rate TXN_PER_S] [--only big|stall]

- ``big``: one upstream transaction of ``--rows`` rows (BIGINT, INT, VARCHAR(255) of 200 bytes)
  is written, then read by the reader (fragments of ``fragment_rows``), then consumed whole by a
  Subscriber (counting its events) and applied by the Spark job (``available_now``) into the
  sink.
- ``stall``: W2 (`rowbus.workloads.W2`: single-row transactions over 8 tables) runs at
  ``--w2-rate`` transactions/s on two sources for ``--stall-s`` seconds plus a short head and
  tail; the second source's reader is down for the stall (it starts afterwards, from where the
  workload began), so the Subscriber and the Spark job, which merge both sources, hold the first
  source's events all that time; then everything must catch up.
- ``shard``: one sharded table on two sources (shard a and shard b, single-row inserts and
  updates at ``--w2-rate`` each); shard a runs ``ALTER TABLE`` after a short head, shard b
  ``--stall-s`` later, so the job (pessimistic shard-DDL coordination) holds shard a's rows
  behind the lock all that time; then the sink must equal both shards.

For the Spark job (``--mode``: its ``apply.mode``) the peak of its whole process tree (the
driver, its JVM, the Python daemon and workers, sampled every second) and what it read from
Kafka against what the data topics hold (1.0: every record read once) are printed too.

Each component runs in a process of its own, so its peak RSS (``ru_maxrss``) is its own; for
Spark the driver's Python process and the JVM (its child) are reported apart. Topics are
deleted at the end. Not a test: figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import pymysql

from benchmarks.common import binlog_end, connect, maxrss_mb
from rowbus.clients import kafka
from rowbus.workloads import W2

PAD = 200
BIG_DDL = "CREATE TABLE big (id BIGINT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(255))"


def _connect(hostport: str, args: argparse.Namespace, db: str | None = None) -> Any:
    return connect(hostport, args.user, args.password, db)


def _hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        out.extend(int(c) for c in children)
    return out


def _tree_memory(pid: int) -> dict[str, float]:
    """MB of `pid` and all its descendants now (the driver, its JVM, the Python daemon and
    every worker and their children), by process kind: the proportional set size (PSS: a page
    shared by n processes — a forked worker's with its daemon's — counts 1/n in each, so the
    kinds add up to the memory the tree holds) and, under "rss", the plain sum of resident
    sizes, which counts shared pages once per process. A process that ends meanwhile counts 0."""
    out: dict[str, float] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            kind = "driver" if p == pid else "jvm" if cmd[0].endswith(b"java") else "python workers"
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith(("Pss:", "Rss:")):
                    mb = int(line.split()[1]) / 1024
                    key = kind if line.startswith("Pss:") else "rss"
                    out[key] = out.get(key, 0.0) + mb
            todo.extend(_children(p))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


# ---- components, each in its own process ------------------------------------------------------


def reader_child(
    args: argparse.Namespace,
    name: str,
    hostport: str,
    db: str,
    topics: dict[str, str],
    start: tuple[str, int],
    end: Any,
    done: Any,
    out: Any,
    quit_: Any = None,
) -> None:
    """A reader from `start`; once `done` is set and its checkpoint reached `end` (a shared
    [file, offset] list filled in by the parent) it reports, and runs on (heartbeats keep the
    consumers' merge moving) until `quit_` is set (at once when None)."""
    from rowbus.clients.settings import SourceConnection
    from rowbus.producer.reader import Reader
    from rowbus.producer.settings import ReaderSettings, Services

    host, port = hostport.split(":")
    settings = ReaderSettings(
        start=f"file:{start[0]}:{start[1]}",
        include_schemas=[db],
        election=False,
        topic_template=topics["data"],
        checkpoints_topic=topics["checkpoints"],
        schemas_topic=topics["schemas"],
        partitions=args.partitions,
    )
    reader = Reader(
        SourceConnection(
            name=name, host=host, port=int(port), user=args.user, password=args.password
        ),
        settings,
        Services(kafka={"bootstrap.servers": args.kafka}, zookeeper_hosts=None),
    )
    stop = threading.Event()
    began = time.monotonic()

    def report() -> None:
        m = reader.metrics.readings()
        out.put(
            {
                "component": f"reader {name}",
                "rss_mb": round(maxrss_mb()),
                "rows": m["rows"],
                "fragments": m["fragments"],
                "seconds": round(time.monotonic() - began, 1),
            }
        )

    def watch() -> None:
        while not stop.is_set():
            pos = reader.committed
            if done.is_set() and pos is not None and (pos.file, pos.offset) >= tuple(end):
                report()
                if quit_ is not None:
                    quit_.wait()
                stop.set()
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    reader.run(stop)


def subscriber_child(
    args: argparse.Namespace,
    sources: list[str],
    topics: dict[str, str],
    expected: Any,
    out: Any,
) -> None:
    """A Subscriber over `sources` until it received `expected.value` row events (set by the
    parent once known) and nothing is buffered."""
    from rowbus.consumers.subscriber import Subscriber
    from rowbus.protocol.events import RowChange

    data_topics = [topics["data"].format(source=s) for s in sources]
    events = [0]
    largest = [0]
    buffered = [0]
    began = time.monotonic()
    with Subscriber(
        {"bootstrap.servers": args.kafka},
        data_topics,
        sources=sources,
        topic_template=topics["data"],
        checkpoints_topic=topics["checkpoints"],
        schemas_topic=topics["schemas"],
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        **(
            {"memory_limit": args.subscriber_memory_limit}
            if args.subscriber_memory_limit is not None
            else {}
        ),
    ) as sub:

        def handle(txn: Any) -> None:
            n = sum(1 for e in txn.events if isinstance(e, RowChange))
            events[0] += n
            largest[0] = max(largest[0], n)

        def done() -> bool:
            buffered[0] = max(buffered[0], sub.merger.buffered)
            return 0 < expected.value <= events[0] and sub.merger.buffered == 0

        sub.run(handle, should_stop=done)
        spilled = sub.merger.stats.spilled_events
    out.put(
        {
            "component": "subscriber",
            "rss_mb": round(maxrss_mb()),
            "events": events[0],
            "largest_txn": largest[0],
            "max_buffered": buffered[0],
            "spilled_events": spilled,
            "seconds": round(time.monotonic() - began, 1),
        }
    )


def bare_consumer_child(
    args: argparse.Namespace, data_topics: list[str], variant: str, out: Any
) -> None:
    """The baseline beside the Subscriber: a bare confluent consumer (`rowbus.clients.kafka`,
    the Subscriber's own settings) reading `data_topics` to their end and dropping each
    record, so its peak RSS is what librdkafka and the broker's fetch answers cost alone.
    `variant` "subscriber-conf": the Subscriber's queue settings; "small-queue": a 1 MB
    pre-fetch queue and 1 MB fetches (which noida-db ignores: this shows whether any client
    setting bounds what one fetch answer brings)."""
    from rowbus.consumers.subscriber import QUEUED_KBYTES

    overrides: dict[str, Any] = {"queued.max.messages.kbytes": QUEUED_KBYTES}
    if variant != "subscriber-conf":
        overrides = {
            "queued.max.messages.kbytes": 1024,
            "fetch.max.bytes": 1 << 20,
            "max.partition.fetch.bytes": 1 << 20,
        }
    began = time.monotonic()
    records, _ = _topic_bytes(args, data_topics, **overrides)
    out.put(
        {
            "component": f"bare consumer ({variant})",
            "rss_mb": round(maxrss_mb()),
            "records": records,
            "seconds": round(time.monotonic() - began, 1),
        }
    )


def spark_child(
    args: argparse.Namespace,
    sources: list[str],
    topics: dict[str, str],
    routes: list[tuple[str, str]],
    job: str,
    stop: Any,
    out: Any,
    shard_tables: tuple[str, ...] = (),
) -> None:
    """The Spark apply job until `stop` is set; then its driver's and JVM's peak RSS, the
    peak of its whole process tree (sampled every second) and what it read from Kafka.
    `shard_tables` (``source/schema.table``): the routes are sharded and the job coordinates
    their DDL through ``topics["control"]``."""
    from rowbus.routing.routes import RouteSettings
    from rowbus.spark_apply.job import BatchApplier, shard_ddl_hook, spark_session, start_query
    from rowbus.spark_apply.settings import (
        ApplySettings,
        JobConfig,
        ShardDdlSettings,
        SinkConnection,
    )

    host, port = args.sink.split(":")
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=tuple(sources),
            topic_template=topics["data"],
            schemas_topic=topics["schemas"],
            routes=tuple(
                RouteSettings(match=m, target=t, sharded=bool(shard_tables)) for m, t in routes
            ),
            mode=args.mode,
            spark_conf=dict(c.split("=", 1) for c in args.spark_conf),
            **(
                {
                    "shard_ddl": ShardDdlSettings(
                        tables=shard_tables, control_topic=topics["control"]
                    )
                }
                if shard_tables
                else {}
            ),
            checkpoint_location=Path(tempfile.mkdtemp(prefix=f"rowbus-bench-{job}-")),
            state_database=f"state_{job}".replace("-", "_"),
            trigger_interval_s=1.0,
            **(
                {"max_offsets_per_trigger": args.max_offsets_per_trigger}
                if args.max_offsets_per_trigger
                else {}
            ),
        ),
        kafka={"bootstrap.servers": args.kafka},
        sink=SinkConnection(
            host=host, port=int(port), user=args.sink_user, password=args.sink_password
        ),
    )
    began = time.monotonic()
    spark = spark_session(config)
    applier = BatchApplier(config, shard_ddl_hook(config)).start()
    query = start_query(spark, config, applier)
    jvm = tree = rss = 0.0
    kinds: dict[str, float] = {}
    series: dict[int, int] = {}
    drivers: dict[int, int] = {}
    me = mp.current_process().pid or 0
    while not stop.wait(1.0):
        if not query.isActive:
            break
        jvm = max([jvm, *(_hwm_mb(c) for c in _children(me))])
        now = _tree_memory(me)
        rss = max(rss, now.pop("rss", 0.0))
        if sum(now.values()) > tree:
            tree, kinds = sum(now.values()), now
        # The tree's size per 30 s (its largest sample): when the peak came, hold or release.
        window = int((time.monotonic() - began) // 30)
        series[window] = max(series.get(window, 0), round(sum(now.values())))
        drivers[window] = max(drivers.get(window, 0), round(now.get("driver", 0.0)))
    error = None if query.isActive else str(query.exception())[:300]
    query.stop()
    applier.close()
    m = applier.metrics
    out.put(
        {
            "component": "spark apply",
            "mode": args.mode,
            "driver_rss_mb": round(maxrss_mb()),
            "jvm_and_workers_peak_mb": round(jvm),
            "process_tree_peak_mb": round(tree),
            "process_tree_peak_by_kind_mb": {k: round(v) for k, v in kinds.items()},
            "process_tree_peak_rss_sum_mb": round(rss),
            "process_tree_mb_per_30s": [series[w] for w in sorted(series)],
            "driver_mb_per_30s": [drivers[w] for w in sorted(drivers)],
            "records_read": m.records_in,
            "bytes_read": m.bytes_in,
            "rows_applied": m.rows_applied,
            "batches": m.batches,
            "seconds": round(time.monotonic() - began, 1),
            "error": error,
        }
    )


# ---- scenarios ------------------------------------------------------------------------------


def _topic_bytes(
    args: argparse.Namespace, data_topics: list[str], **overrides: Any
) -> tuple[int, int]:
    """(records, value bytes) in `data_topics` up to their ends now (read_committed), read by
    a bare consumer (`overrides`: its settings)."""
    consumer = kafka.consumer({"bootstrap.servers": args.kafka}, **overrides)
    try:
        ends: dict[tuple[str, int], int] = {}
        for topic in data_topics:
            meta = consumer.list_topics(topic, timeout=10)
            for p in meta.topics[topic].partitions:
                _, high = consumer.get_watermark_offsets(kafka.kafka_tp(topic, p), timeout=10)
                ends[topic, p] = high
        consumer.assign([kafka.kafka_tp(t, p, 0) for t, p in ends])
        records = size = 0
        at = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 1800
        while any(at[tp] < ends[tp] for tp in ends):
            if time.monotonic() > deadline:
                raise TimeoutError("the data topics were not read to their ends in 1800s")
            msgs = consumer.consume(1000, 1.0)
            for m in msgs:
                if m.error() is None and m.offset() < ends[m.topic(), m.partition()]:
                    records += 1
                    size += len(m.value() or b"")
            # Positions, not record offsets: a transaction's commit marker takes the last
            # offset below the end, and only the position moves past it; asked after every
            # consume, as the readers may still be adding heartbeats past the ends.
            for tp in consumer.position([kafka.kafka_tp(t, p) for t, p in ends]):
                at[tp.topic, tp.partition] = max(tp.offset, 0)
    finally:
        consumer.close()
    return records, size


def _reads(args: argparse.Namespace, spark: dict[str, Any], data_topics: list[str]) -> None:
    """What the job read from Kafka against what the data topics hold: 1.0 is every record
    read once (the issue's "Kafka bytes read per applied row", as bytes read over the bytes
    of the records that carry the rows and their watermarks)."""
    records, size = _topic_bytes(args, data_topics)
    spark["topic_records"], spark["topic_bytes"] = records, size
    spark["bytes_read_per_topic_byte"] = round(spark["bytes_read"] / max(size, 1), 3)
    print(
        f"reads: the job read {spark['bytes_read']:,} bytes in {spark['records_read']:,} "
        f"records; the data topics hold {size:,} bytes in {records:,} records: "
        f"{spark['bytes_read_per_topic_byte']}x; {spark['rows_applied']:,} rows applied; "
        f"process tree peak {spark['process_tree_peak_mb']} MB PSS "
        f"{spark['process_tree_peak_by_kind_mb']} ({spark['mode']} mode)",
        flush=True,
    )


def _sink_state(args: argparse.Namespace, job: str) -> tuple[int, int] | None:
    """(batches committed, stash events of the last one) of the Spark job."""
    db = f"state_{job}".replace("-", "_")
    with _connect(args.sink, _sink_args(args)) as conn, conn.cursor() as cur:
        try:
            cur.execute(
                f"SELECT batch_id, stash_events FROM `{db}`.apply_state_header "
                "ORDER BY batch_id DESC LIMIT 1"
            )
        except pymysql.err.ProgrammingError:
            return None
        row = cur.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _sink_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(user=args.sink_user, password=args.sink_password)


def _count(hostport: str, args: argparse.Namespace, db: str, table: str) -> int:
    with _connect(hostport, args, db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{table}`")
        return int(cur.fetchone()[0])


def _wait(condition: Any, timeout: float, what: str) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)
    return time.monotonic() - began


def big(args: argparse.Namespace, ctx: Any) -> list[dict[str, Any]]:  # noqa: PLR0915 - one script
    tag = uuid.uuid4().hex[:8]
    db, source = f"bench_big_{tag}", f"big_{tag}"
    topics = {
        "data": f"bench.big.{tag}.{{source}}",
        "checkpoints": f"bench.big.ckpt.{tag}",
        "schemas": f"bench.big.schemas.{tag}",
    }
    with _connect(args.mysql, args) as conn:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            cur.execute(BIG_DDL)
        start = binlog_end(conn)
        began = time.monotonic()
        conn.autocommit(False)
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO big SELECT seq, seq % 1000, REPEAT(CHAR(65 + seq % 26), {PAD}) "
                f"FROM seq_1_to_{args.rows}"
            )
        conn.commit()
        print(
            f"big: {args.rows} rows written in one transaction in {time.monotonic() - began:.1f}s",
            flush=True,
        )
        end = binlog_end(conn)
    out = ctx.Queue()
    done = ctx.Event()
    done.set()
    results = []
    reader = ctx.Process(
        target=reader_child,
        args=(args, source, args.mysql, db, topics, start, list(end), done, out),
    )
    reader.start()
    results.append(out.get(timeout=3600))
    reader.join(60)
    print(json.dumps(results[-1]), flush=True)
    for variant in ("subscriber-conf", "small-queue"):
        bare = ctx.Process(
            target=bare_consumer_child,
            args=(args, [topics["data"].format(source=source)], variant, out),
        )
        bare.start()
        results.append(out.get(timeout=3600))
        bare.join(60)
        print(json.dumps(results[-1]), flush=True)
    expected = ctx.Value("q", args.rows)
    sub = ctx.Process(target=subscriber_child, args=(args, [source], topics, expected, out))
    sub.start()
    results.append(out.get(timeout=3600))
    sub.join(60)
    print(json.dumps(results[-1]), flush=True)
    sink_db = f"bench_big_sink_{tag}"
    with _connect(args.sink, _sink_args(args)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{sink_db}`")
        cur.execute(f"USE `{sink_db}`")
        cur.execute(BIG_DDL)
    stop = ctx.Event()
    job = f"bench-big-{tag}"
    spark = ctx.Process(
        target=spark_child,
        args=(args, [source], topics, [(f"{db}.*", f"{sink_db}.{{table}}")], job, stop, out),
    )
    spark.start()
    try:
        took = _wait(
            lambda: (
                _count(args.sink, _sink_args(args), sink_db, "big") >= args.rows
                or not spark.is_alive()
            ),
            3600,
            "the Spark job to apply the transaction",
        )
        applied = _count(args.sink, _sink_args(args), sink_db, "big") >= args.rows
        print(f"big: the sink has the transaction: {applied}, after {took:.0f}s", flush=True)
    finally:
        stop.set()
        results.append(out.get(timeout=600))
        spark.join(120)
    _reads(args, results[-1], [topics["data"].format(source=source)])
    print(json.dumps(results[-1]), flush=True)
    _delete_topics(args, [topics["data"].format(source=source), *list(topics.values())[1:]])
    return results


class _Workload(Protocol):
    def step(self, conn: Any) -> int: ...


def _start_writers(
    args: argparse.Namespace,
    servers: dict[str, str],
    db: dict[str, str],
    workloads: Mapping[str, _Workload],
) -> tuple[dict[str, int], threading.Event, list[threading.Thread]]:
    """A workload (W2, `_ShardRows`) on every source at --w2-rate transactions/s until the
    returned event is set; the writing threads, to join once it is."""
    written = dict.fromkeys(servers, 0)
    halt = threading.Event()

    def write(s: str) -> None:
        with _connect(servers[s], args, db[s]) as conn:
            conn.autocommit(False)
            next_at = time.monotonic()
            while not halt.is_set():
                written[s] += workloads[s].step(conn)
                next_at += 1 / args.w2_rate
                time.sleep(max(0.0, next_at - time.monotonic()))

    threads = [
        threading.Thread(target=write, args=(s,), daemon=True, name=f"writer-{s}") for s in servers
    ]
    for t in threads:
        t.start()
    return written, halt, threads


def _two_sources(
    args: argparse.Namespace, scenario: str
) -> tuple[str, dict[str, str], list[str], dict[str, str], dict[str, str]]:
    """(tag, server per source, sources, database per source, topics) of a scenario over the
    two source servers, named apart from every other run."""
    tag = uuid.uuid4().hex[:8]
    servers = {f"a_{tag}": args.mysql, f"b_{tag}": args.mysql2}
    db = {s: f"bench_{scenario}_{s}" for s in servers}
    topics = {
        "data": f"bench.{scenario}.{tag}.{{source}}",
        "checkpoints": f"bench.{scenario}.ckpt.{tag}",
        "schemas": f"bench.{scenario}.schemas.{tag}",
    }
    return tag, servers, list(servers), db, topics


def stall(args: argparse.Namespace, ctx: Any) -> list[dict[str, Any]]:  # noqa: PLR0915 - one script
    tag, servers, sources, db, topics = _two_sources(args, "stall")
    workloads = {s: W2(db[s], initial_rows=400, seed=n + 1) for n, s in enumerate(sources)}
    starts = {}
    for s in sources:
        with _connect(servers[s], args) as conn:
            starts[s] = binlog_end(conn)
            conn.autocommit(False)
            workloads[s].create(conn)
    sink_dbs = {s: f"bench_stall_sink_{s}" for s in sources}
    with _connect(args.sink, _sink_args(args)) as conn, conn.cursor() as cur:
        for s in sources:
            cur.execute(f"CREATE DATABASE `{sink_dbs[s]}`")
    routes = [(f"{db[s]}.*", f"{sink_dbs[s]}.{{table}}") for s in sources]
    out = ctx.Queue()
    done = ctx.Event()
    ends = {s: mp.Manager().list([start[0], start[1]]) for s, start in starts.items()}
    expected = ctx.Value("q", 0)
    stop_spark = ctx.Event()
    quit_ = ctx.Event()
    job = f"bench-stall-{tag}"
    a, b = sources
    _create_topics(args, [topics["data"].format(source=s) for s in sources], topics)
    procs = {
        "reader a": ctx.Process(
            target=reader_child,
            args=(args, a, servers[a], db[a], topics, starts[a], ends[a], done, out, quit_),
        ),
        "subscriber": ctx.Process(
            target=subscriber_child, args=(args, sources, topics, expected, out)
        ),
        "spark": ctx.Process(
            target=spark_child, args=(args, sources, topics, routes, job, stop_spark, out)
        ),
    }
    for p in procs.values():
        p.start()
    written, halt, _threads = _start_writers(args, servers, db, workloads)
    head, tail = 20.0, 20.0
    print(
        f"stall: W2 at {args.w2_rate}/s on both sources; reader {b} down for {args.stall_s:.0f}s",
        flush=True,
    )
    time.sleep(head + args.stall_s)
    procs["reader b"] = ctx.Process(
        target=reader_child,
        args=(args, b, servers[b], db[b], topics, starts[b], ends[b], done, out, quit_),
    )
    procs["reader b"].start()
    restarted = time.monotonic()
    time.sleep(tail)
    halt.set()
    for s in sources:
        with _connect(servers[s], args) as conn:
            ends[s][:] = list(binlog_end(conn))
    print(f"stall: wrote {written} transactions; catching up", flush=True)
    done.set()
    results = [out.get(timeout=3600) for _ in range(2)]  # both readers, once caught up
    for r in results:
        print(json.dumps(r), flush=True)

    def caught_up() -> bool:
        if not procs["spark"].is_alive():
            raise RuntimeError("the Spark job stopped")
        try:
            return all(
                _count(servers[s], args, db[s], t)
                == _count(args.sink, _sink_args(args), sink_dbs[s], t)
                for s in sources
                for t in workloads[s].names()
            )
        except pymysql.err.ProgrammingError:  # a target table not created yet
            return False

    took = _wait(caught_up, 3600, "the sink to equal both sources")
    print(
        f"stall: the sink equals both sources {time.monotonic() - restarted:.0f}s after the "
        f"reader came back (last check {took:.0f}s); Spark state {_sink_state(args, job)}",
        flush=True,
    )
    stop_spark.set()
    # The Subscriber stops once it received every row event: the initial rows and the steps.
    expected.value = sum(
        workloads[s].initial_rows // workloads[s].tables * 8 + written[s] for s in sources
    )
    for _ in range(2):
        results.append(out.get(timeout=3600))
        if results[-1]["component"] == "spark apply":
            _reads(args, results[-1], [topics["data"].format(source=s) for s in sources])
        print(json.dumps(results[-1]), flush=True)
    quit_.set()
    for p in procs.values():
        p.join(120)
    _delete_topics(
        args, [topics["data"].format(source=s) for s in sources] + list(topics.values())[1:]
    )
    return results


SHARD_DDL = "CREATE TABLE t (id BIGINT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(200))"
SHARD_ALTER = "ALTER TABLE t ADD COLUMN note VARCHAR(20) NULL"


class _ShardRows:
    """The shard scenario's workload on one shard: single-row transactions, an insert (ids of
    parity `odd`, so the shards' rows are distinct in the merged table) and every other one an
    update of an earlier row."""

    def __init__(self, odd: int) -> None:
        self.odd, self.n = odd, 0

    def step(self, conn: Any) -> int:
        i = self.n
        with conn.cursor() as cur:
            if i % 2 and i > 2:  # an even i below this one inserted its row
                cur.execute("UPDATE t SET v = v + 1 WHERE id = %s", (2 * (i // 4 * 2) + self.odd,))
            else:
                cur.execute(
                    "INSERT INTO t (id, v, pad) VALUES (%s, %s, REPEAT('p', 150))",
                    (2 * i + self.odd, i),
                )
        conn.commit()
        self.n += 1
        return 1


def shard(args: argparse.Namespace, ctx: Any) -> list[dict[str, Any]]:  # noqa: PLR0915 - one script
    """A shard-DDL hold: two shards of one sharded table, written on two sources; shard a
    ALTERs at once, shard b ``--stall-s`` later, so the job holds shard a's rows behind the
    lock for that long (pessimistic coordination) while both keep writing."""
    tag, servers, sources, db, topics = _two_sources(args, "shard")
    topics["control"] = f"bench.shard.control.{tag}"
    starts = {}
    for s in sources:
        with _connect(servers[s], args) as conn, conn.cursor() as cur:
            starts[s] = binlog_end(conn)
            cur.execute(f"CREATE DATABASE `{db[s]}`")
            cur.execute(f"USE `{db[s]}`")
            cur.execute(SHARD_DDL)
    sink_db = f"bench_shard_sink_{tag}"
    with _connect(args.sink, _sink_args(args)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{sink_db}`")
        cur.execute(f"USE `{sink_db}`")
        cur.execute(SHARD_DDL)
    data_topics = [topics["data"].format(source=s) for s in sources]
    _create_topics(args, data_topics, topics)
    out = ctx.Queue()
    done, quit_, stop_spark = ctx.Event(), ctx.Event(), ctx.Event()
    ends = {s: mp.Manager().list([start[0], start[1]]) for s, start in starts.items()}
    job = f"bench-shard-{tag}"
    procs = {
        f"reader {s}": ctx.Process(
            target=reader_child,
            args=(args, s, servers[s], db[s], topics, starts[s], ends[s], done, out, quit_),
        )
        for s in sources
    }
    procs["spark"] = ctx.Process(
        target=spark_child,
        args=(
            args,
            sources,
            topics,
            [(f"{db[s]}.t", f"{sink_db}.t") for s in sources],
            job,
            stop_spark,
            out,
            tuple(f"{s}/{db[s]}.t" for s in sources),
        ),
    )
    for p in procs.values():
        p.start()
    written, halt, writers = _start_writers(
        args, servers, db, {s: _ShardRows(n) for n, s in enumerate(sources)}
    )
    a, b = sources
    head = 20.0
    time.sleep(head)
    with _connect(servers[a], args, db[a]) as conn, conn.cursor() as cur:
        cur.execute(SHARD_ALTER)
    print(f"shard: {a} altered; {b} alters in {args.stall_s:.0f}s", flush=True)
    time.sleep(args.stall_s)
    with _connect(servers[b], args, db[b]) as conn, conn.cursor() as cur:
        cur.execute(SHARD_ALTER)
    altered = time.monotonic()
    time.sleep(head)
    halt.set()
    for w in writers:
        w.join(30)
    for s in sources:
        with _connect(servers[s], args) as conn:
            ends[s][:] = list(binlog_end(conn))
    print(f"shard: wrote {list(written.values())} transactions; catching up", flush=True)
    done.set()
    results = [out.get(timeout=3600) for _ in sources]
    for r in results:
        print(json.dumps(r), flush=True)

    def caught_up() -> bool:
        if not procs["spark"].is_alive():
            raise RuntimeError("the Spark job stopped")
        with _connect(args.sink, _sink_args(args), sink_db) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(v), 0) FROM t")
            sink = tuple(int(x) for x in cur.fetchone())
            cur.execute("SHOW COLUMNS FROM t LIKE 'note'")
            has_note = cur.fetchone() is not None
        total = [0, 0]
        for s in sources:
            with _connect(servers[s], args, db[s]) as conn, conn.cursor() as cur:
                cur.execute("SELECT COUNT(*), COALESCE(SUM(v), 0) FROM t")
                count, sum_v = cur.fetchone()
                total = [total[0] + int(count), total[1] + int(sum_v)]
        return has_note and sink == tuple(total)

    took = _wait(caught_up, 3600, "the sink to equal both shards")
    print(
        f"shard: the sink equals both shards {time.monotonic() - altered:.0f}s after the "
        f"second ALTER (last check {took:.0f}s); Spark state {_sink_state(args, job)}",
        flush=True,
    )
    stop_spark.set()
    results.append(out.get(timeout=3600))
    _reads(args, results[-1], data_topics)
    print(json.dumps(results[-1]), flush=True)
    quit_.set()
    for p in procs.values():
        p.join(120)
    _delete_topics(args, [*data_topics, *list(topics.values())[1:]])
    return results


def _create_topics(args: argparse.Namespace, data: list[str], topics: dict[str, str]) -> None:
    """The topics, before the consumers look for them (the readers would make them later)."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    from rowbus.protocol.topics import (
        CHECKPOINTS_TOPIC_CONFIG,
        CONTROL_TOPIC_CONFIG,
        CONTROL_TOPIC_PARTITIONS,
        DATA_TOPIC_CONFIG,
        SCHEMAS_TOPIC_CONFIG,
    )

    new = [NewTopic(t, args.partitions, 1, config=dict(DATA_TOPIC_CONFIG)) for t in data]
    new.append(NewTopic(topics["checkpoints"], 1, 1, config=dict(CHECKPOINTS_TOPIC_CONFIG)))
    new.append(NewTopic(topics["schemas"], 1, 1, config=dict(SCHEMAS_TOPIC_CONFIG)))
    if "control" in topics:
        new.append(
            NewTopic(
                topics["control"], CONTROL_TOPIC_PARTITIONS, 1, config=dict(CONTROL_TOPIC_CONFIG)
            )
        )
    admin = kafka.admin({"bootstrap.servers": args.kafka})
    for future in admin.create_topics(new).values():
        future.result(30)


def _delete_topics(args: argparse.Namespace, names: list[str]) -> None:
    kafka.admin({"bootstrap.servers": args.kafka}).delete_topics(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bounded", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mysql", default="127.0.0.1:13306", help="first source")
    parser.add_argument("--mysql2", default="127.0.0.1:13307", help="second source")
    parser.add_argument("--sink", default="127.0.0.1:13308")
    parser.add_argument("--user", default="rowbus")
    parser.add_argument("--password", default="rowbus")
    parser.add_argument("--sink-user", default="rowbus")
    parser.add_argument("--sink-password", default="rowbus")
    parser.add_argument("--kafka", default="127.0.0.1:19092")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--stall-s", type=float, default=300.0, help="the lane stall, and the shard-DDL hold"
    )
    parser.add_argument("--w2-rate", type=float, default=200.0, help="transactions/s per source")
    parser.add_argument("--only", choices=["big", "stall", "shard"])
    parser.add_argument(
        "--mode",
        choices=["snapshot", "parallel", "throughput"],
        default="snapshot",
        help="the apply job's apply.mode",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="records per Spark micro-batch (default: the job's default)",
    )
    parser.add_argument(
        "--subscriber-memory-limit",
        type=int,
        default=None,
        help="events held before spilling (default: the Subscriber's default)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the job (apply.spark_conf), repeatable",
    )
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    results = []
    if args.only in (None, "big"):
        results += big(args, ctx)
    if args.only in (None, "stall"):
        results += stall(args, ctx)
    if args.only in (None, "shard"):
        results += shard(args, ctx)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
