"""`rowbus tail TOPIC…`: merged transactions as JSON lines, or a readable table."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from rowbus.clients.prometheus import Exporter
from rowbus.commands.common import add_metrics_port, metrics_port
from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tail = sub.add_parser(
        "tail",
        help="print the merged transactions of data topics in commit order: one JSON line per "
        "transaction (or a readable table with --pretty), from any start position",
    )
    tail.add_argument("topics", nargs="+", metavar="TOPIC", help="data topics to read")
    tail.add_argument(
        "--from",
        dest="start",
        default="earliest",
        help="where to start without a stored checkpoint: earliest (default), latest, "
        "timestamp:UNIX_SECONDS or timestamp:ISO_DATE_TIME (UTC if naive), SOURCE@gtid:GTID or "
        "SOURCE@file:BINLOG_FILE:POS (a GTID or binlog position applies to the named source "
        "only; the other sources start from earliest) — the same grammar as reader.start",
    )
    tail.add_argument("--pretty", action="store_true", help="a readable table, not JSON")
    tail.add_argument(
        "--source",
        dest="sources",
        action="append",
        default=None,
        help="a source expected on the topics (repeatable; default: subscriber.sources, plus "
        "those the checkpoints topic lists)",
    )
    tail.add_argument(
        "--checkpoint-file",
        type=Path,
        default=None,
        help="keep the position in this file and resume from it (at least once)",
    )
    tail.add_argument("--max-transactions", type=int, default=None, help="stop after N")
    add_metrics_port(tail, "subscriber.metrics_port")
    tail.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        help="stop after this many seconds without a transaction (default: run until Ctrl-C)",
    )
    tail.add_argument(
        "--stats", action="store_true", help="print events/s and counters to stderr at the end"
    )
    tail.set_defaults(func=_tail)


def _tail(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.consumers.subscriber import Subscriber
    from rowbus.merge.start import StartFrom

    conf = settings.subscriber
    subscriber = Subscriber(
        settings.kafka.client_config(),
        args.topics,
        store=_printed_first(args.checkpoint_file, sys.stdout) if args.checkpoint_file else None,
        start=StartFrom.parse(args.start),
        sources=tuple(args.sources) if args.sources else conf.sources,
        topic_template=conf.topic_template,
        checkpoints_topic=conf.checkpoints_topic,
        schemas_topic=conf.schemas_topic,
        group_id=conf.group_id,
        memory_limit=conf.memory_limit_events,
        read_ahead=conf.read_ahead_events,
        spill_dir=conf.spill_dir,
        batch_size=conf.batch_size,
        stall_report_s=conf.stall_report_s,
    )
    out = sys.stdout
    began = time.perf_counter()
    port = metrics_port(args, conf.metrics_port)
    exporter = None
    if port is not None:
        exporter = Exporter()
        exporter.register("subscriber", subscriber.prometheus, labels={"lane_watermark_ts": "lane"})
        bound = exporter.serve(port)
        print(f"rowbus tail: metrics on http://127.0.0.1:{bound}/metrics", file=sys.stderr)
    with subscriber:
        write = _pretty if args.pretty else _json_line
        count = subscriber.run(
            lambda txn: write(out, subscriber, txn),
            max_transactions=args.max_transactions,
            idle_timeout=args.idle_timeout,
        )
        out.flush()
        if args.stats:
            seconds = time.perf_counter() - began
            stats = subscriber.merger.stats
            print(
                f"{count} transactions, {stats.released_events} rows, "
                f"{subscriber.events_read} records read in {seconds:.1f}s = "
                f"{subscriber.events_read / seconds:,.0f} records/s; {stats}",
                file=sys.stderr,
            )
    return 0


def _printed_first(path: Path, out: TextIO) -> Any:
    """The checkpoint file, saved only once the lines it covers have left this process: stdout
    to a file or a pipe is block-buffered, and a kill -9 after a save would lose the
    transactions still in the buffer although the checkpoint says they were delivered."""
    from rowbus.consumers.stores import FileCheckpointStore
    from rowbus.merge.checkpoint import Checkpoint

    class PrintedFirst(FileCheckpointStore):
        def _save(self, checkpoint: Checkpoint) -> None:
            out.flush()
            super()._save(checkpoint)

    return PrintedFirst(path)


def _plain(v: Any) -> Any:
    match v:
        case Decimal():
            return str(v)
        case dt.date() | dt.datetime():
            return v.isoformat()
        case dt.timedelta():
            return str(v)
        case bytes():
            return base64.b64encode(v).decode("ascii")
        case frozenset():
            return sorted(v)
        case _:
            return v


def _image(subscriber: Any, event: Any, image: Any) -> dict[str, Any] | None:
    if image is None:
        return None
    try:
        names = subscriber.table(event).column_names
    except Exception:  # noqa: BLE001 - an unknown schema still prints positionally
        names = [f"col{i}" for i in range(len(image))]
    return {name: _plain(v) for name, v in zip(names, image, strict=False)}


def _event_dict(subscriber: Any, event: Any) -> dict[str, Any]:
    from rowbus.protocol.events import DdlChange, SnapshotBegin, SnapshotEnd

    base = {"schema": event.schema, "table": event.table, "position": str(event.position)}
    if isinstance(event, DdlChange):
        return {"op": "ddl", **base, "statement": event.statement}
    if isinstance(event, SnapshotBegin):
        return {
            "op": "snapshot_begin",
            **base,
            "snapshot": event.snapshot,
            "mode": event.mode.value,
        }
    if isinstance(event, SnapshotEnd):
        mode = event.mode.value
        return {
            "op": "snapshot_end",
            **base,
            "snapshot": event.snapshot,
            "mode": mode,
            "rows": event.rows,
        }
    return {
        "op": event.op.value,
        **base,
        "before": _image(subscriber, event, event.before),
        "after": _image(subscriber, event, event.after),
    }


def _when(ts: int) -> str:
    from rowbus.protocol.hlc import physical_ms

    return dt.datetime.fromtimestamp(physical_ms(ts) / 1000, dt.UTC).isoformat(
        timespec="milliseconds"
    )


def _json_line(out: TextIO, subscriber: Any, txn: Any) -> None:
    record = {
        "source": txn.source,
        "txn": txn.id,
        "ts": txn.ts,
        "time": _when(txn.ts),
        "first": str(txn.first),
        "last": str(txn.last),
        "events": [_event_dict(subscriber, e) for e in txn.events],
    }
    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


def _pretty(out: TextIO, subscriber: Any, txn: Any) -> None:
    out.write(f"── {_when(txn.ts)}  {txn.source}  {txn.id}  ({len(txn)} events, {txn.first})\n")
    for event in txn.events:
        d = _event_dict(subscriber, event)
        table = f"{d['schema']}.{d['table']}"
        if d["op"] == "ddl":
            out.write(f"   {'DDL':<6} {table:<28} {d['statement']}\n")
            continue
        before, after = d["before"] or {}, d["after"] or {}
        if d["op"] == "update":
            change = ", ".join(
                f"{k}: {before.get(k)!r} → {v!r}" for k, v in after.items() if before.get(k) != v
            )
        else:
            change = ", ".join(f"{k}={v!r}" for k, v in (after or before).items())
        out.write(f"   {d['op'].upper():<6} {table:<28} {change}\n")
