"""`rowbus snapshot TABLE…`: the operator's signal to a source's reader, on the control topic.

Why the control topic, not a signal table: it needs no write access to the source (a read-only
replica or user works), and it needs no new record kind — a signal is a `ControlRecord` of kind
``operator_note`` whose lock id ``snapshot:<source>:<id>`` is not a shard-DDL lock id (no
``#N``), so the shard-DDL lock table ignores it (PROTOCOL.md §9.5 item 5). Its `detail` is JSON
``{"snapshot": ["db.t", …]}``; `shard` names the source. The reader keeps the next offset to read
in its checkpoint (`SnapshotState.signal_offset`), so a signal is taken once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from rowbus.clients import kafka
from rowbus.clients.errors import KafkaClientError
from rowbus.protocol.codec import decode, encode
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import ControlKind, ControlRecord
from rowbus.protocol.topics import control_key

log = logging.getLogger(__name__)

PREFIX = "snapshot:"


def signal(source: str, tables: list[str], actor: str = "rowbus snapshot") -> ControlRecord:
    """The signal asking `source`'s reader to snapshot `tables` (``db.table``)."""
    return ControlRecord(
        lock_id=f"{PREFIX}{source}:{uuid.uuid4().hex[:12]}",
        kind=ControlKind.OPERATOR_NOTE,
        shard=source,
        statement=None,
        ts=int(time.time() * 1000) << 16,
        actor=actor,
        detail=json.dumps({"snapshot": tables}, separators=(",", ":")),
    )


def tables_asked(record: object, source: str) -> list[str] | None:
    """The tables a signal for `source` asks for; None when `record` is no such signal."""
    if not isinstance(record, ControlRecord) or record.kind is not ControlKind.OPERATOR_NOTE:
        return None
    if not record.lock_id.startswith(PREFIX) or record.shard != source:
        return None
    try:
        asked = json.loads(record.detail).get("snapshot")
    except (ValueError, AttributeError):
        return None
    if not isinstance(asked, list):
        return None
    return [str(t) for t in asked]


def publish(client_config: Mapping[str, Any], topic: str, source: str, tables: list[str]) -> str:
    """Append a signal and wait for the broker's acknowledgement; returns its id."""
    record = signal(source, tables)
    value, headers = encode(record)
    producer = kafka.producer(client_config)
    errors: list[object] = []
    producer.produce(
        topic,
        value=value,
        key=control_key(record.lock_id),
        headers=headers,
        partition=0,
        on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
    )
    try:
        left = producer.flush(30)
    finally:
        kafka.close_producer(producer, timeout=0)
    if errors:
        raise kafka.failure_error(errors[0], f"publishing to {topic}")
    if left:
        raise KafkaClientError(f"publishing to {topic}: no acknowledgement in 30 s", "timeout")
    return record.lock_id


class SignalWatch:
    """Follows partition 0 of the signal topic from an offset; `poll()` never blocks."""

    def __init__(self, client_config: Mapping[str, Any], topic: str, source: str, offset: int):
        self.topic, self.source, self.offset = topic, source, offset
        self._consumer = kafka.consumer(client_config)
        self._consumer.assign([kafka.kafka_tp(topic, 0, offset)])

    def poll(self, max_messages: int = 100) -> list[list[str]]:
        """Signals for this source that arrived since the last poll (the offset moves past
        every message read, signal or not)."""
        found: list[list[str]] = []
        for _ in range(max_messages):
            msg = self._consumer.poll(0)
            if msg is None:
                break
            if msg.error() is not None:
                log.debug("signal topic %s: %s", self.topic, msg.error())
                break
            self.offset = int(msg.offset()) + 1
            try:
                record = decode(msg.value(), msg.headers(), f"{self.topic}@{msg.offset()}")
            except ProtocolError as exc:
                log.warning("signal topic %s: skipping a record: %s", self.topic, exc)
                continue
            asked = tables_asked(record, self.source)
            if asked is not None:
                found.append(asked)
        return found

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._consumer.close()
