"""Faults injected at a Kafka transaction's commit, for the tests of kill -9 mid-snapshot and
between the fragments of a huge transaction.

Unset (always, outside tests), `armed` returns None and the commit pipeline calls nothing. With
``ROWBUS_READER_FAULT=<action>:<n>`` in the environment, the reader process SIGKILLs itself in a
Kafka transaction after its records were delivered to the broker, before its checkpoint is
produced and the transaction committed:

- ``kill-in-snapshot:<rows>``: in the first transaction of an initial (or reset) snapshot whose
  checkpoint would take the snapshot's row counter (`SnapshotState.seq`) to `<rows>` or past it;
- ``kill-in-fragments:<n>``: in the `n`-th transaction of this process that carries a fragment
  of a huge upstream transaction still open (PROTOCOL.md §9.1), `n - 1` fragments committed.

The chunk or fragment is published and not committed, as a kill -9 at a random moment mostly
finds it, and the checkpoint still says where the last committed one ended; the next reader's
fencing aborts the open transaction.

A test that kills a reader from outside at a row count it reads back from the checkpoints lands
its kill as late as the test lags the reader (tens of thousands of rows on a loaded machine,
so the snapshot had to be big enough to still be running); fired by the reader at its own row
counter, the kill lands at the same place under any load. It logs a WARNING line first, naming
where (a logging stream handler flushes each line).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

from rowbus.producer.exceptions import ReaderError
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint

log = logging.getLogger(__name__)

ENV = "ROWBUS_READER_FAULT"
ACTIONS = ("kill-in-snapshot", "kill-in-fragments")

Fault = Callable[[ReaderCheckpoint, BinlogPosition | None], None]
"""Called with a transaction's checkpoint (offsets not yet set) and, when it carries a fragment
of an open upstream transaction, where its fragments end; once its records are delivered and
before the checkpoint is produced and the transaction committed."""


def armed() -> Fault | None:
    """The fault ``ROWBUS_READER_FAULT`` asks for; None when it is unset (the default)."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    action, _, count = spec.partition(":")
    if action not in ACTIONS or not count.isdigit() or int(count) < 1:
        raise ReaderError(
            f"{ENV}={spec!r}: expected <action>:<n> with action one of "
            f"{', '.join(ACTIONS)} and n >= 1; unset it outside tests"
        )
    at = int(count)
    seen = [0]

    def kill_in_snapshot(checkpoint: ReaderCheckpoint, _fragment: BinlogPosition | None) -> None:
        if checkpoint.snapshot is None:
            return
        state = SnapshotState.from_json(checkpoint.snapshot)
        if state.done or state.seq < at:
            return
        _kill(spec, checkpoint, f"snapshot rows up to {state.seq}")

    def kill_in_fragments(checkpoint: ReaderCheckpoint, fragment: BinlogPosition | None) -> None:
        if fragment is None:
            return
        seen[0] += 1
        if seen[0] == at:
            _kill(spec, checkpoint, f"fragment {at} ending at binlog {fragment}")

    return kill_in_snapshot if action == "kill-in-snapshot" else kill_in_fragments


def _kill(spec: str, checkpoint: ReaderCheckpoint, what: str) -> None:
    log.warning(
        "%s=%s: SIGKILL of reader %s with %s delivered in an open transaction, not committed "
        "(resume position binlog %s)",
        ENV,
        spec,
        checkpoint.reader_id,
        what,
        checkpoint.position,
    )
    os.kill(os.getpid(), signal.SIGKILL)
