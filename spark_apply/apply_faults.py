"""Faults injected at a step's commit in the sink, for the tests of kill -9 of the apply driver.

Unset (always, outside tests), `armed` returns None and `sinks.Sink` calls nothing. With
``ROWBUS_APPLY_FAULT=<action>:<n>`` in the environment, the driver process SIGKILLs itself
at the `n`-th step this process commits (counting the steps of every batch, in order):

- ``kill-before-commit``: the step's rows, its checkpoint row and the head's move written in
  the open sink transaction, before the commit. The server rolls it back; Spark's commit log,
  one batch ahead of the sink when the write overlaps the next read (`overlap`), has the
  batch done: a restart must rewind it and apply the step again;
- ``kill-after-commit``: right after the commit. The sink holds the step (the whole batch
  for a last step); Spark has logged the batch done and may be reading the next, or, not yet
  logged, replays it and the sink skips what it holds.

A test that kills the driver from outside once it sees a checkpoint lands its kill wherever
the driver is by then (mostly between batches, on a loaded machine), so it had to kill many
times to likely hit both windows; fired by the driver at its own step count, the kill lands
in the window every time. It logs a WARNING line first, naming where.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

from rowbus.spark_apply.exceptions import ApplyError

log = logging.getLogger(__name__)

ENV = "ROWBUS_APPLY_FAULT"
ACTIONS = {"kill-before-commit": False, "kill-after-commit": True}
"""Each action, and whether it fires after the commit (else before it)."""

Fault = Callable[[int, int, bool], None]
"""Called with the batch id, the step index and False just before a step's commit; with True
just after it."""


def armed() -> Fault | None:
    """The fault ``ROWBUS_APPLY_FAULT`` asks for; None when it is unset (the default)."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    action, _, count = spec.partition(":")
    if action not in ACTIONS or not count.isdigit() or int(count) < 1:
        raise ApplyError(
            f"{ENV}={spec!r}: expected <action>:<n> with action one of "
            f"{', '.join(ACTIONS)} and n >= 1; unset it outside tests"
        )
    at, after_commit = int(count), ACTIONS[action]
    seen = [0]

    def kill(batch_id: int, step: int, committed: bool) -> None:
        if committed is not after_commit:
            return
        seen[0] += 1
        if seen[0] != at:
            return
        log.warning(
            "%s=%s: SIGKILL of the driver %s the commit of batch %d step %d",
            ENV,
            spec,
            "after" if committed else "before",
            batch_id,
            step,
        )
        os.kill(os.getpid(), signal.SIGKILL)

    return kill
