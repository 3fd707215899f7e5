"""A subscriber process for kill -9 tests: ``python -m tests.integration.consumers.subscriber_proc
SPEC_JSON``. It prints one JSON line per handled transaction (source, txn, ts) and keeps its
checkpoint in the store the spec names:

- ``kafka`` / ``zookeeper``: `Subscriber.run` saves after each polled batch (at least once);
- ``sql``: each transaction's rows go into table ``applied`` of the sink database together
  with the checkpoint, in one database transaction (exactly once): a replayed transaction
  fails the checkpoint check and would break the primary key, so it cannot apply twice.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pymysql

from rowbus.consumers.stores import (
    CheckpointStore,
    KafkaOffsetStore,
    SqlCheckpointStore,
    ZooKeeperStore,
)
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import RowChange


def connect(db: dict[str, Any]) -> Any:
    return pymysql.connect(**db, autocommit=False, connect_timeout=5)


def store_of(spec: dict[str, Any]) -> CheckpointStore:
    kind = spec["store"]
    if kind == "kafka":
        return KafkaOffsetStore(
            {"bootstrap.servers": spec["bootstrap"]},
            group_id=spec["group"],
            topics=tuple(spec["sources"]),
        )
    if kind == "zookeeper":
        return ZooKeeperStore(spec["path"], hosts=spec["zookeeper"])
    return SqlCheckpointStore(lambda: connect(spec["db"]), name="tail")


def main() -> None:
    spec = json.loads(sys.argv[1])
    store = store_of(spec)
    sub = Subscriber(
        {"bootstrap.servers": spec["bootstrap"]},
        spec["sources"],
        store=store,
        sources=spec["sources"],
        topic_template="{source}",
        checkpoints_topic=spec["checkpoints"],
        schemas_topic=spec["schemas"],
        group_id=spec["group"],
        batch_size=50,
    )
    out = sys.stdout
    db = connect(spec["db"]) if isinstance(store, SqlCheckpointStore) else None

    def handle(txn: Transaction) -> None:
        if db is not None and isinstance(store, SqlCheckpointStore):
            with db.cursor() as cur:
                for event in txn.events:
                    assert isinstance(event, RowChange)
                    cur.execute("INSERT INTO applied VALUES (%s, %s)", (txn.id, event.image[0]))
            store.save_in(db, txn.checkpoint)
            db.commit()
        out.write(json.dumps({"source": txn.source, "txn": txn.id, "ts": txn.ts}) + "\n")
        out.flush()

    with sub:
        sub.run(handle, idle_timeout=spec.get("idle_timeout"))


if __name__ == "__main__":
    main()
