"""`rowbus status`: readers, watermarks, the apply checkpoint and open DDL locks on one screen.

Every part is read from where the platform keeps it — ZooKeeper (reader leadership), the
checkpoints topic (each source's committed position and ts), the sink (the apply job's
checkpoint rows), the control topic (shard-DDL locks) — and a part that cannot be read is shown
as unavailable with the reason instead of failing the whole screen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from rowbus.clients import mysql, zookeeper
from rowbus.config import Settings
from rowbus.protocol.hlc import physical_ms
from rowbus.spark_apply.progress import AppliedBatch, last_applied


@dataclass(frozen=True)
class ReaderStatus:
    source: str
    leader: str | None
    standbys: int
    position: str | None
    watermark_ts: int | None


ApplyStatus = AppliedBatch


def reader_status(settings: Settings) -> list[ReaderStatus]:
    from rowbus.producer.checkpoints import load_checkpoint
    from rowbus.producer.leader import contenders

    assert settings.zookeeper.hosts is not None
    client = zookeeper.start_client(settings.zookeeper.hosts, 5.0, start_timeout=10.0)
    try:
        result = []
        for source in settings.sources:
            ordered = contenders(client, settings.zookeeper.root, source.name)
            checkpoint = load_checkpoint(
                settings.kafka.client_config(), settings.reader.checkpoints_topic, source.name, 15
            )
            result.append(
                ReaderStatus(
                    source.name,
                    ordered[0] if ordered else None,
                    max(0, len(ordered) - 1),
                    str(checkpoint.position) if checkpoint else None,
                    checkpoint.ts if checkpoint else None,
                )
            )
        return result
    finally:
        zookeeper.stop_client(client)


def apply_status(settings: Settings) -> ApplyStatus | None:
    with mysql.connect(settings.resolved_sink, connect_timeout=5) as conn:
        return last_applied(conn, settings.apply.state_database, settings.apply.job)


def lock_lines(settings: Settings) -> list[str]:
    from rowbus.clients import kafka
    from rowbus.consumers.shard_ddl.control import ControlLog
    from rowbus.consumers.shard_ddl.locks import replay
    from rowbus.protocol.topics import CONTROL_TOPIC

    admin = kafka.admin(settings.kafka.client_config())
    if CONTROL_TOPIC not in admin.list_topics(timeout=10).topics:
        return []  # no shard DDL was ever coordinated
    log = ControlLog(settings.kafka.client_config(), CONTROL_TOPIC).start()
    try:
        table = replay(log.read_to_end())
    finally:
        log.close()
    return [
        f"{lock.lock_id} {lock.state.value}: {json.dumps(lock.describe(), default=str)[:160]}"
        for lock in table.unresolved()
    ]


def _ago(ts: int | None, now_ms: int) -> str:
    if ts is None:
        return "-"
    lag = max(0, now_ms - physical_ms(ts))
    stamp = time.strftime("%H:%M:%S", time.localtime(physical_ms(ts) / 1000))
    return f"{stamp} (lag {lag / 1000:.1f}s)"


def _guard(what: str, out: TextIO, read: Callable[[], None]) -> bool:
    try:
        read()
    except Exception as exc:  # noqa: BLE001 - one unreadable part must not hide the others
        print(f"  {what}: unavailable ({type(exc).__name__}: {exc})", file=out)
        return False
    return True


def print_status(settings: Settings, out: TextIO) -> int:
    now_ms = int(time.time() * 1000)
    ok = True

    def readers() -> None:
        rows = reader_status(settings)
        print(
            f"  {'SOURCE':<12} {'LEADER':<24} {'STANDBY':>7}  {'POSITION':<40} WATERMARK", file=out
        )
        for r in rows:
            print(
                f"  {r.source:<12} {r.leader or '(none)':<24} {r.standbys:>7}  "
                f"{r.position or '(no checkpoint)':<40} {_ago(r.watermark_ts, now_ms)}",
                file=out,
            )

    def applier() -> None:
        status = apply_status(settings)
        if status is None:
            print(f"  job {settings.apply.job}: no batch committed yet", file=out)
            return
        print(
            f"  job {status.job}: batch {status.batch_id} committed {status.committed_at}, "
            f"{status.rows} rows; watermark {_ago(status.watermark_ts, now_ms)}",
            file=out,
        )

    def locks() -> None:
        lines = lock_lines(settings)
        print(f"  {len(lines)} unresolved" + (":" if lines else ""), file=out)
        for line in lines:
            print(f"    {line}", file=out)

    print("readers", file=out)
    ok &= _guard("readers", out, readers)
    print("apply", file=out)
    ok &= _guard("apply checkpoint", out, applier)
    print("shard-DDL locks", file=out)
    ok &= _guard("locks", out, locks)
    return 0 if ok else 3
