"""tests/budget.py: a wait bounded by the CPU its processes use, and by a wall-clock cap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rowbus.exceptions import WaitTimeoutError
from tests.budget import BudgetSpent, session_cpu_seconds, wait_for_work


@contextmanager
def _session(code: str) -> Iterator[subprocess.Popen[bytes]]:
    """`code` run by a process that leads its own session, with a child of the same session."""
    child = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {code!r}]); {code}"
    proc = subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group too: the child with it
        proc.wait(10)


BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
IDLE = "import threading; threading.Event().wait(30)"


def test_a_busy_tree_that_never_gets_there_spends_its_budget() -> None:
    with _session(BUSY) as proc:
        with pytest.raises(BudgetSpent, match="not done after"):
            wait_for_work(lambda: False, session=proc.pid, cpu_s=0.3, wall_s=25, what="never")
        assert session_cpu_seconds(proc.pid) > 0.3


def test_an_idle_tree_ends_at_the_wall_clock_cap_and_a_true_condition_at_once() -> None:
    with _session(IDLE) as proc:
        with pytest.raises(WaitTimeoutError):
            wait_for_work(lambda: False, session=proc.pid, cpu_s=60, wall_s=1.0, what="never")
        assert wait_for_work(lambda: 7, session=proc.pid, cpu_s=0, wall_s=1, what="now") == 7
