"""Waits for a process tree bounded by the work it does (its CPU seconds), not by the wall clock.

A fixed wall-clock wait for a Spark driver's first batch (120 s) or its whole run (300 s) held on
a quiet machine and ran out beside other suites (load 20-31): the same work took longer because
the driver got a smaller share of the cores. What a hang looks like is the work never done for
the CPU it used: so the wait fails when the processes of the session (the driver, its JVM, its
Python workers, children already reaped included) used `cpu_s` CPU seconds without the
condition, and, for a process that waits on something without using CPU, at a wall-clock cap
well above the CPU budget.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rowbus.waiting import wait_for

T = TypeVar("T")
_TICKS = os.sysconf("SC_CLK_TCK")


class BudgetSpent(AssertionError):
    """The processes used their CPU budget and the condition still did not hold."""


def session_cpu_seconds(session: int) -> float:
    """CPU seconds (user + system, of the live processes and of the children they reaped) of
    every process in `session` (a process started with ``start_new_session=True`` leads the
    session numbered by its pid)."""
    ticks = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (proc / "stat").read_text()
            # After the command name in parentheses (which may hold spaces): state is field 3.
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == session:  # field 6, the session id
                ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / _TICKS


def wait_for_work(
    condition: Callable[[], T | None],
    *,
    session: int,
    cpu_s: float,
    wall_s: float,
    what: str,
) -> T:
    """`condition`'s first truthy value; BudgetSpent once `session`'s processes used `cpu_s`
    CPU seconds more than when the wait began, WaitTimeoutError after `wall_s`."""
    start = session_cpu_seconds(session)

    def check() -> T | None:
        found = condition()
        if found:
            return found
        used = session_cpu_seconds(session) - start
        if used > cpu_s:
            raise BudgetSpent(f"{what}: not done after {used:.0f} CPU seconds (budget {cpu_s:.0f})")
        return None

    return wait_for(check, timeout=wall_s, what=what, stop_on=(BudgetSpent,))
