"""`rowbus status`: readers, watermarks, the apply checkpoint and open DDL locks on one screen.

Every part is read from where the platform keeps it — ZooKeeper (reader leadership), the
checkpoints topic (each source's committed position and ts), the sink (the apply job's
checkpoint rows), the control topic (shard-DDL locks) — and a part that cannot be read is shown
as unavailable with the reason instead of failing the whole screen.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO, cast

from rowbus.clients import kafka, mysql, zookeeper
from rowbus.config import Settings
from rowbus.exceptions import WaitTimeoutError
from rowbus.protocol.errors import RowbusError
from rowbus.protocol.hlc import physical_ms
from rowbus.spark_apply.progress import AppliedBatch, every_job
from rowbus.waiting import wait_for


@dataclass(frozen=True)
class ReaderStatus:
    source: str
    leader: str | None
    standbys: int
    position: str | None
    watermark_ts: int | None
    stalls: tuple[str, ...] = ()
    """Partitions whose committed records read_committed consumers cannot read."""
    snapshot: dict[str, object] | None = None
    """The source's snapshot progress (rows, rows/s, ETA per table), when one ran."""


ApplyStatus = AppliedBatch


@dataclass(frozen=True)
class IcebergTableStatus:
    """One job's newest commit in one Iceberg table of the sink (its snapshot summary)."""

    table: str
    job: str
    batch: int
    step: int
    committed_at: str
    snapshots: int
    """The table's snapshots now (maintenance expires old ones)."""


def reader_status(settings: Settings) -> list[ReaderStatus]:
    from rowbus.producer.checkpoints import load_checkpoint
    from rowbus.producer.leader import contenders
    from rowbus.producer.snapshot.progress import summary
    from rowbus.producer.snapshot.state import SnapshotState

    assert settings.zookeeper.hosts is not None
    admin = kafka.admin(settings.kafka.client_config())
    client = zookeeper.start_client(
        settings.zookeeper.hosts, 5.0, start_timeout=10.0, auth=settings.zookeeper.auth
    )
    try:
        result = []
        for source in settings.sources:
            ordered = contenders(client, settings.zookeeper.root, source.name)
            checkpoint = load_checkpoint(
                settings.kafka.client_config(),
                admin,
                settings.reader.checkpoints_topic,
                source.name,
                15,
            )
            result.append(
                ReaderStatus(
                    source.name,
                    ordered[0] if ordered else None,
                    max(0, len(ordered) - 1),
                    str(checkpoint.position) if checkpoint else None,
                    checkpoint.ts if checkpoint else None,
                    unreadable(admin, {(t, p): o for t, p, o in checkpoint.offsets})
                    if checkpoint
                    else (),
                    summary(SnapshotState.from_json(checkpoint.snapshot), time.time())
                    if checkpoint and checkpoint.snapshot
                    else None,
                )
            )
        return result
    finally:
        zookeeper.stop_client(client)


def unreadable(
    admin: object, committed: dict[tuple[str, int], int], within: float = 5.0
) -> tuple[str, ...]:
    """The partitions whose last stable offset stays below the offsets a reader's checkpoint
    says are committed (its records and the checkpoint share one transaction, so only the
    commit markers still being written can hold them, for milliseconds)."""
    found: list[kafka.Stall] = []

    def readable() -> bool:
        found[:] = kafka.stalls(admin, committed)
        return not found

    with contextlib.suppress(WaitTimeoutError):
        wait_for(readable, timeout=within, what="stable offsets", stop_on=(RowbusError,))
    return tuple(str(stall) for stall in found)


def cluster_status(settings: Settings) -> dict[str, object] | None:
    """The reader cluster (`rowbus reader node`): nodes, coordinator, each source's owner and
    replication-set state, pending moves; None when no node ever registered under the root."""
    from rowbus.producer.cluster import admin, zk

    with admin.session(
        settings.zookeeper.hosts or "", settings.zookeeper.root, 5.0, settings.zookeeper.auth
    ) as (c, p):
        view = admin.view(c, p)
        if not view.nodes and not view.sets:
            return None
        return admin.summary(view, zk.coordinator(c, p))


def apply_status(settings: Settings) -> list[ApplyStatus]:
    """The last batch of every job keeping its state in the configured state database."""
    with mysql.connect(settings.resolved_sink, connect_timeout=5) as conn:
        return every_job(conn, settings.apply.state_database)


def iceberg_status(settings: Settings) -> list[IcebergTableStatus]:
    """Each job's last committed batch in each Iceberg table of the configured catalog."""
    from rowbus.spark_apply.iceberg_catalog import last_commits, open_catalog, sink_tables

    catalog = open_catalog(settings.apply.iceberg)
    found = []
    for ident in sink_tables(catalog, settings.apply.iceberg.namespace):
        table = catalog.load_table(ident)
        for c in last_commits(table):
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.timestamp_ms / 1000))
            found.append(
                IcebergTableStatus(
                    ".".join(ident), c.job, c.batch, c.step, at, len(table.metadata.snapshots)
                )
            )
    return found


def open_locks(settings: Settings) -> list[dict[str, object]]:
    """The unresolved shard-DDL locks on the configured control topic."""
    from rowbus.clients import kafka
    from rowbus.shard_ddl.control import ControlLog
    from rowbus.shard_ddl.locks import replay

    topic = settings.apply.shard_ddl.control_topic
    admin = kafka.admin(settings.kafka.client_config())
    if topic not in admin.list_topics(timeout=10).topics:
        return []  # no shard DDL was ever coordinated on it
    log = ControlLog(settings.kafka.client_config(), topic).start()
    try:
        table = replay(log.read_to_end())
    finally:
        log.close()
    return [
        {"lock": lock.lock_id, "state": lock.state.value, **lock.describe()}
        for lock in table.unresolved()
    ]


@dataclass
class Report:
    """What `rowbus status` shows; a part that cannot be read is named in `unavailable`."""

    readers: list[ReaderStatus] = field(default_factory=list)
    cluster: dict[str, object] | None = None
    """The reader cluster's `admin.summary`, when the deployment runs reader nodes."""
    jobs: list[ApplyStatus] = field(default_factory=list)
    locks: list[dict[str, object]] = field(default_factory=list)
    iceberg: list[IcebergTableStatus] = field(default_factory=list)
    """With ``apply.sink_kind: iceberg``: each table's last committed batch."""
    unavailable: dict[str, str] = field(default_factory=dict)


def collect(settings: Settings) -> Report:
    report = Report()

    def read_cluster() -> None:
        report.cluster = cluster_status(settings)

    parts: list[tuple[str, Callable[[], None]]] = [
        ("readers", lambda: report.readers.extend(reader_status(settings))),
        ("cluster", read_cluster),
        ("apply", lambda: report.jobs.extend(apply_status(settings))),
        ("locks", lambda: report.locks.extend(open_locks(settings))),
    ]
    if settings.apply.sink_kind == "iceberg":
        parts.append(("iceberg", lambda: report.iceberg.extend(iceberg_status(settings))))
    for name, read in parts:
        try:
            read()
        except Exception as exc:  # noqa: BLE001 - one unreadable part must not hide the others
            report.unavailable[name] = f"{type(exc).__name__}: {exc}"
    return report


def _ago(ts: int | None, now_ms: int) -> str:
    if ts is None:
        return "-"
    lag = max(0, now_ms - physical_ms(ts))
    stamp = time.strftime("%H:%M:%S", time.localtime(physical_ms(ts) / 1000))
    return f"{stamp} (lag {lag / 1000:.1f}s)"


def as_json(settings: Settings, report: Report, now_ms: int) -> str:
    def lag(ts: int | None) -> int | None:
        return None if ts is None else max(0, now_ms - physical_ms(ts))

    return json.dumps(
        {
            "readers": [{**asdict(r), "lag_ms": lag(r.watermark_ts)} for r in report.readers],
            "cluster": report.cluster,
            "jobs": [
                {
                    **asdict(j),
                    "configured": j.job == settings.apply.job,
                    "lag_ms": lag(j.watermark_ts),
                }
                for j in report.jobs
            ],
            "control_topic": settings.apply.shard_ddl.control_topic,
            "locks": report.locks,
            "iceberg": [asdict(t) for t in report.iceberg],
            "unavailable": report.unavailable,
        },
        default=str,
        sort_keys=True,
    )


def print_status(settings: Settings, out: TextIO, *, as_json_lines: bool = False) -> int:
    """Print the report (text, or one JSON object); exit status 3 when a part is unavailable
    or a reader's committed records are stalled behind an unresolved transaction."""
    now_ms = int(time.time() * 1000)
    report = collect(settings)
    if as_json_lines:
        print(as_json(settings, report, now_ms), file=out)
        return _exit(report)
    print("readers", file=out)
    if "readers" in report.unavailable:
        print(f"  readers: unavailable ({report.unavailable['readers']})", file=out)
    else:
        print(
            f"  {'SOURCE':<12} {'LEADER':<24} {'STANDBY':>7}  {'POSITION':<40} WATERMARK", file=out
        )
        for r in report.readers:
            print(
                f"  {r.source:<12} {r.leader or '(none)':<24} {r.standbys:>7}  "
                f"{r.position or '(no checkpoint)':<40} {_ago(r.watermark_ts, now_ms)}",
                file=out,
            )
            for stall in r.stalls:
                print(f"    STALLED {stall}", file=out)
            if r.snapshot is not None:
                from rowbus.producer.snapshot.progress import status_line

                print(f"  {'':<12} {status_line(r.snapshot)}", file=out)
    _print_cluster(report, out)
    print(f"apply (state in {settings.apply.state_database})", file=out)
    if "apply" in report.unavailable:
        print(f"  apply checkpoint: unavailable ({report.unavailable['apply']})", file=out)
    else:
        if settings.apply.job not in {j.job for j in report.jobs}:
            print(f"  job {settings.apply.job}: no batch committed yet", file=out)
        for j in report.jobs:
            mark = " (configured)" if j.job == settings.apply.job else ""
            print(
                f"  job {j.job}{mark}: batch {j.batch_id} committed {j.committed_at}, "
                f"{j.rows} rows; watermark {_ago(j.watermark_ts, now_ms)}",
                file=out,
            )
    print(f"shard-DDL locks (control topic {settings.apply.shard_ddl.control_topic})", file=out)
    if "locks" in report.unavailable:
        print(f"  locks: unavailable ({report.unavailable['locks']})", file=out)
    else:
        print(f"  {len(report.locks)} unresolved" + (":" if report.locks else ""), file=out)
        for lock in report.locks:
            print(f"    {json.dumps(lock, default=str)[:200]}", file=out)
            if lock.get("stuck"):
                # a participant's wedge report (shard_ddl/wedge.py), in full
                print(f"    STUCK {lock['lock']}: {lock['stuck']}", file=out)
    _print_iceberg(settings, report, out)
    return _exit(report)


def _print_iceberg(settings: Settings, report: Report, out: TextIO) -> None:
    if settings.apply.sink_kind != "iceberg":
        return
    print("iceberg tables (apply.iceberg.catalog)", file=out)
    if "iceberg" in report.unavailable:
        print(f"  iceberg: unavailable ({report.unavailable['iceberg']})", file=out)
        return
    if not report.iceberg:
        print("  no table committed yet", file=out)
    for t in report.iceberg:
        print(
            f"  {t.table}: job {t.job} batch {t.batch} step {t.step} committed "
            f"{t.committed_at} UTC; {t.snapshots} snapshot(s)",
            file=out,
        )


def _print_cluster(report: Report, out: TextIO) -> None:
    if "cluster" in report.unavailable:
        print(f"reader cluster: unavailable ({report.unavailable['cluster']})", file=out)
        return
    c = report.cluster
    if c is None:
        return  # no reader nodes: each source has its own election (shown above)
    print(f"reader cluster (coordinator {c['coordinator'] or '(none)'})", file=out)
    for n in cast(list[dict[str, Any]], c["nodes"]):
        marks = [m for m in ("coordinator", "draining") if n[m]]
        marks.append("live" if n["live"] else "GONE")
        print(f"  node {n['node']} ({', '.join(marks)}): {', '.join(n['tasks']) or '-'}", file=out)
    for row in cast(list[dict[str, Any]], c["sets"]):
        print(
            f"  set {row['source']:<12} {row['state']:<11} owner={row['owner'] or '-'} "
            f"target={row['target'] or '-'}",
            file=out,
        )
    moves = cast(list[dict[str, Any]], c["moves"])
    print(f"  {len(moves)} pending move(s)" + (":" if moves else ""), file=out)
    for m in moves:
        how = "requested" if m["requested"] else "scheduled"
        print(
            f"    {m['source']}: {m['from'] or '-'} -> {m['to'] or '-'} ({how}, {m['state']})",
            file=out,
        )


def _exit(report: Report) -> int:
    """3 when a part cannot be read or committed records cannot be read."""
    return 3 if report.unavailable or any(r.stalls for r in report.readers) else 0
