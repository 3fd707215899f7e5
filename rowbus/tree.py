"""Run a child command as its own process group and stop the whole group on a signal.

`rowbus apply` starts the Spark job this way: the job's Python driver, its JVM and the JVM's
Python workers share the group. SIGTERM or SIGINT to `rowbus apply` asks the driver to stop
(it ends its query and Spark session, taking the JVM and the workers with it); whatever of the
group is still alive after the grace period, or after the driver exited, is killed — nothing is
left running. Zombies do
not count as alive: pid 1 of a container may never reap them.

The child also dies with this process when this one is killed with SIGKILL and cannot stop
the group itself (a supervisor's last resort, the OOM killer): on Linux it is started with a
parent-death signal (SIGTERM, so the driver still stops its query, JVM and workers as on any
other stop). Without it, a killed `rowbus apply` left its job running, and the restart that
a supervisor then makes ran a second job on the same checkpoint beside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)

STOP_GRACE_S = 60.0
"""How long a stopping group may take to commit what it can before it is killed."""


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` giving the child SIGTERM when this process dies (Linux prctl); None where
    prctl does not exist. libc is loaded here, before the fork, not in the child."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return setup


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
                members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(
    pgid: int,
    grace_s: float = STOP_GRACE_S,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> bool:
    """TERM the group, wait up to `grace_s` for it to end, then KILL what is left; True if it
    ended within the grace period."""
    signal_group(pgid, signal.SIGTERM)
    deadline = clock() + grace_s
    while group_members(pgid):
        if clock() > deadline:
            left = group_members(pgid)
            log.warning("process group %d still has %s after %.0fs: killing", pgid, left, grace_s)
            signal_group(pgid, signal.SIGKILL)
            kill_deadline = clock() + 10
            while group_members(pgid) and clock() < kill_deadline:
                sleep(0.05)
            return False
        sleep(0.1)
    return True


def run_group(
    args: Sequence[str], env: Mapping[str, str] | None = None, grace_s: float = STOP_GRACE_S
) -> int:
    """Run `args` as a new process group until it exits; SIGTERM/SIGINT to this process stop
    the whole group (TERM, then KILL after `grace_s`). Returns the child's exit status (128 +
    the signal when it was stopped by one)."""
    proc = subprocess.Popen(
        list(args),
        env=dict(env) if env is not None else None,
        start_new_session=True,
        preexec_fn=_die_with_parent(),  # noqa: PLW1509 - prctl only, no locks taken
    )
    stopping = threading.Event()
    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if not stopping.is_set():
            log.warning("signal %d: stopping %s (group %d)", signum, args[0], proc.pid)
            stopping.set()
            # The child stops its helpers itself (a Spark driver ends its JVM); the group is
            # killed only when it does not end within the grace period.
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = _wait(proc, stopping, grace_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # The child is gone; its helpers (a JVM, workers) must not outlive it.
        if group_members(proc.pid):
            stop_group(proc.pid, min(grace_s, 20.0))
    return 128 + received[0] if received and status < 0 else status


def _wait(proc: subprocess.Popen[bytes], stopping: threading.Event, grace_s: float) -> int:
    stopped_at: float | None = None
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        if stopping.is_set():
            stopped_at = stopped_at or time.monotonic()
            if time.monotonic() - stopped_at > grace_s:
                log.warning("%s did not stop within %.0fs: killing its group", proc.args, grace_s)
                signal_group(proc.pid, signal.SIGKILL)
