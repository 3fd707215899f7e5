"""Faults injected at a step's commit in the sink, for the tests of kill -9 of the apply driver.

Unset (always, outside tests), `armed` returns None and `sinks.Sink` calls nothing. With
``ROWBUS_APPLY_FAULT=<action>:<n>`` in the environment, the driver process SIGKILLs itself
at the `n`-th step this process commits (counting the steps of every batch, in order):

- ``kill-before-commit``: the step's rows, its checkpoint row and the head's move written in
  the open sink transaction, the commit held until Spark calls the job for the next batch
  (`batch_started`: Spark's commit log then has this batch done, one batch ahead of the sink
  as `overlap` allows; at most `HOLD_S`), then SIGKILL. The server rolls the step back: a
  restart must rewind Spark's log and apply the step again;
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
import threading

from rowbus.clients.faults import fault_spec
from rowbus.spark_apply.exceptions import ApplyError

log = logging.getLogger(__name__)

ENV = "ROWBUS_APPLY_FAULT"
ACTIONS = {"kill-before-commit": False, "kill-after-commit": True}
"""Each action, and whether it fires after the commit (else before it)."""

HOLD_S = 120.0
"""How long ``kill-before-commit`` holds the commit for Spark to start the next batch (a
last batch has none: the kill then lands with Spark's log not ahead)."""


class Fault:
    """The kill `armed` made: `at_commit` around each step's commit, `batch_started` when Spark
    calls the job for a batch."""

    def __init__(self, spec: str, at: int, after_commit: bool) -> None:
        self.spec, self.at, self.after_commit = spec, at, after_commit
        self.seen = 0
        self.started = -1
        self.cond = threading.Condition()

    def batch_started(self, batch_id: int) -> None:
        with self.cond:
            self.started = max(self.started, batch_id)
            self.cond.notify_all()

    def at_commit(self, batch_id: int, step: int, committed: bool) -> None:
        """Called with False just before a step's commit, with True just after it."""
        if committed is not self.after_commit:
            return
        self.seen += 1
        if self.seen != self.at:
            return
        ahead = False
        if not committed:
            with self.cond:
                ahead = self.cond.wait_for(lambda: self.started > batch_id, HOLD_S)
        log.warning(
            "%s=%s: SIGKILL of the driver %s the commit of batch %d step %d%s",
            ENV,
            self.spec,
            "after" if committed else "before",
            batch_id,
            step,
            " (Spark runs the next batch)" if ahead else "",
        )
        os.kill(os.getpid(), signal.SIGKILL)


def armed() -> Fault | None:
    """The fault ``ROWBUS_APPLY_FAULT`` asks for; None when it is unset (the default)."""
    try:
        parsed = fault_spec(ENV, ACTIONS)
    except ValueError as exc:
        raise ApplyError(str(exc)) from None
    if parsed is None:
        return None
    spec, action, at = parsed
    return Fault(spec, at, ACTIONS[action])
