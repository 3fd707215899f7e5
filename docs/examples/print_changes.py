"""Print every row change of rowbus data topics in commit order, one JSON line each, and resume
where the last run stopped: the Subscriber SDK in one page (docs/subscriber.md).

    python docs/examples/print_changes.py rowbus.source1 rowbus.source2

It keeps its position in a file (`--position`), saved after each batch of transactions it
printed: a crash repeats at most that batch (at least once). A program that writes to a
database saves the position in the same transaction instead (exactly once, see the doc).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rowbus.consumers import Subscriber
from rowbus.consumers.stores.file import FileCheckpointStore
from rowbus.merge import Transaction
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("topics", nargs="+", help="data topics (rowbus.{source} by default)")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092", help="Kafka bootstrap servers")
    parser.add_argument("--checkpoints-topic", default="rowbus.checkpoints")
    parser.add_argument("--schemas-topic", default="rowbus.schemas")
    parser.add_argument("--position", default="print_changes.position", help="position file")
    parser.add_argument("--max-transactions", type=int, default=None, help="stop after N")
    parser.add_argument("--idle-timeout", type=float, default=None, help="stop when idle so long")
    args = parser.parse_args(argv)

    with Subscriber(
        {"bootstrap.servers": args.bootstrap},
        args.topics,
        store=FileCheckpointStore(args.position),
        checkpoints_topic=args.checkpoints_topic,
        schemas_topic=args.schemas_topic,
    ) as subscriber:

        def show(txn: Transaction) -> None:
            # A transaction arrives whole, after every earlier one of every source.
            for event in txn.events:
                line: dict[str, object] = {"source": txn.source, "txn": txn.id}
                if isinstance(event, RowChange):
                    table = subscriber.table(event)  # the row's schema, by its schema id
                    line |= {
                        "table": f"{event.schema}.{event.table}",
                        "op": event.op.value,
                        "before": event.before_dict(table),
                        "after": event.after_dict(table),
                    }
                elif isinstance(event, DdlChange):
                    line |= {"ddl": event.statement, "schema": event.schema}
                elif isinstance(event, SnapshotBegin | SnapshotEnd):
                    # a table's snapshot begins / ends: after the end, the rows a handler saw
                    # since the begin are the whole table (PROTOCOL.md §9.7)
                    kind = "snapshot_begin" if isinstance(event, SnapshotBegin) else "snapshot_end"
                    line |= {"table": f"{event.schema}.{event.table}", "marker": kind}
                print(json.dumps(line, default=str, ensure_ascii=False), flush=True)

        subscriber.run(show, max_transactions=args.max_transactions, idle_timeout=args.idle_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
