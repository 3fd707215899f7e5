"""`rowbus snapshot [--source S] TABLE…`: ask a source's reader to backfill tables while it
streams (an incremental snapshot, PROTOCOL.md §9.5 item 5).

The request is a signal on the reader's ``reader.signal_topic`` (the control topic): it needs
no write access to the source. The reader takes it within a second, reads the tables in
primary-key chunks between its streamed transactions and shows the progress in `rowbus status`;
a keyless table is refused with one line in the reader's log and in the status.
"""

from __future__ import annotations

import argparse

from rowbus.config import Settings
from rowbus.producer.snapshot.signals import publish


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "snapshot",
        help="backfill tables of a source while its reader streams (incremental snapshot)",
        description="Publish every existing row of the tables as read rows, chunk by chunk, "
        "without pausing the stream (DBLog's watermark algorithm). Needs reader.signal_topic.",
    )
    cmd.add_argument("--source", help="the source (default: the only one configured)")
    cmd.add_argument("tables", nargs="+", metavar="TABLE", help="db.table")
    cmd.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    topic = settings.reader.signal_topic
    if topic is None:
        print("rowbus snapshot: set reader.signal_topic (e.g. rowbus.control) for the readers")
        return 2
    bad = [t for t in args.tables if t.count(".") != 1 or "" in t.split(".")]
    if bad:
        print(f"rowbus snapshot: not db.table: {', '.join(bad)}")
        return 2
    if args.source is None and len(settings.sources) != 1:
        names = ", ".join(s.name for s in settings.sources) or "none"
        print(f"rowbus snapshot: name a source with --source ({names})")
        return 2
    source = settings.source(args.source) if args.source else settings.sources[0]
    signal_id = publish(settings.kafka.client_config(), topic, source.name, list(args.tables))
    print(f"asked {source.name}'s reader to snapshot {', '.join(args.tables)} ({signal_id})")
    return 0
