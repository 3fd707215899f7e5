"""Faults injected at a snapshot chunk's commit, for the tests of kill -9 mid-snapshot.

Unset (always, outside tests), `armed` returns None and the commit pipeline calls nothing. With
``ROWBUS_READER_FAULT=<action>:<rows>`` in the environment, the reader process SIGKILLs itself
in (or after) the first Kafka transaction of an initial (or reset) snapshot whose checkpoint
takes the snapshot's row counter (`SnapshotState.seq`) to `<rows>` or past it:

- ``kill-in-snapshot``: after the transaction's records were delivered to the broker, before its
  checkpoint is produced and the transaction committed. The chunk is published and not
  committed, as a kill -9 at a random moment of a snapshot mostly finds it; the next reader's
  fencing aborts the open transaction.
- ``kill-after-snapshot``: right after the transaction committed, before anything of the next
  chunk is produced: a kill between two chunks, no transaction left open.

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

from rowbus.clients.faults import fault_spec
from rowbus.producer.exceptions import ReaderError
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import ReaderCheckpoint

log = logging.getLogger(__name__)

ENV = "ROWBUS_READER_FAULT"
ACTIONS = {"kill-in-snapshot": False, "kill-after-snapshot": True}
"""Each action, and whether it fires after the commit (else before it)."""

Fault = Callable[[ReaderCheckpoint, bool], None]
"""Called with a transaction's checkpoint (offsets not yet set) and False once its records are
delivered, before the checkpoint is produced and the transaction committed; with True once the
transaction committed."""


def armed() -> Fault | None:
    """The fault ``ROWBUS_READER_FAULT`` asks for; None when it is unset (the default)."""
    try:
        parsed = fault_spec(ENV, ACTIONS, "rows")
    except ValueError as exc:
        raise ReaderError(str(exc)) from None
    if parsed is None:
        return None
    spec, action, at = parsed
    after_commit = ACTIONS[action]

    def kill(checkpoint: ReaderCheckpoint, committed: bool) -> None:
        if committed is not after_commit or checkpoint.snapshot is None:
            return
        state = SnapshotState.from_json(checkpoint.snapshot)
        if state.done or state.seq < at:
            return
        log.warning(
            "%s=%s: SIGKILL of reader %s with snapshot rows up to %d %s (resume position "
            "binlog %s)",
            ENV,
            spec,
            checkpoint.reader_id,
            state.seq,
            "committed" if committed else "delivered in an open transaction, not committed",
            checkpoint.position,
        )
        os.kill(os.getpid(), signal.SIGKILL)

    return kill
