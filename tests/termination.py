"""SIGTERM to the pytest process ends the run, and the session's finalizers stop what it started.

Before, a SIGTERM unwound like Ctrl-C only while the session's own handler was installed. Code
under test installs its own (`rowbus reader run`'s graceful stop, the apply job's main,
`rowbus.tree`'s forwarding), and a SIGTERM arriving while one of those was installed stopped
that code and nothing else: the run went on to the next tests and even exited 0 (measured: a
test that installs a handler, SIGTERM 5 s in, three tests passed).

So `install` makes every SIGTERM count, whoever handles it:
- the session's handler records it and raises KeyboardInterrupt (pytest stops after unwinding
  the test, then runs the session finalizers: the services fixture stops the stack);
- a handler that code under test installs on the main thread is wrapped so that it records the
  signal too, then runs as it would; after that test, `stop_if_terminated` stops the session.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Termination:
    """The SIGTERM state of one pytest process (one instance, made by `install`)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._install = signal.signal

    def interrupt(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            return  # a second SIGTERM must not cut the finalizers that the first one started
        self.received = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def wrap(self, signum: int, handler: Handler) -> Handler:
        """`signal.signal` as the process sees it: a SIGTERM handler installed on the main thread
        (the only thread that runs handlers) also records the signal."""
        if (
            signum != signal.SIGTERM
            or not callable(handler)
            or handler == self.interrupt
            or threading.current_thread() is not threading.main_thread()
        ):
            return self._install(signum, handler)
        inner = handler

        def recorded(sig: int, frame: FrameType | None) -> Any:
            self.received = sig
            return inner(sig, frame)

        return self._install(signum, recorded)

    def reinstall(self) -> None:
        """The session's handler again (before each test: whatever ran before replaced it)."""
        self._install(signal.SIGTERM, self.interrupt)

    def stop_if_terminated(self, session: pytest.Session) -> None:
        if self.received is not None:
            session.shouldstop = f"signal {self.received} received: stopping the run"


def install() -> Termination:
    termination = Termination()
    termination.reinstall()
    signal.signal = termination.wrap  # type: ignore[assignment]
    return termination
