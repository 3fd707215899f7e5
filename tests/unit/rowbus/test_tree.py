"""`rowbus.tree.run_group`: the group it starts does not outlive it, even when it is killed
with SIGKILL (a supervisor's last resort, the OOM killer) and so cannot stop the group itself.

Found by the nemesis (`benchmarks.nemesis`): `rowbus apply` killed with -9 left its Spark job
running; the supervisor's restart then ran a second job on the same checkpoint beside it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from rowbus.local.procs import gone
from rowbus.waiting import wait_for

# The child records its pid (written whole, then renamed) and waits for a signal.
CHILD = """
import os, signal, sys
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.replace(tmp, sys.argv[1])
signal.pause()
"""

RUNNER = """
import sys
from rowbus.tree import run_group
sys.exit(run_group([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
"""


def _pid(path: Path) -> int | None:
    return int(path.read_text()) if path.exists() else None


def test_the_child_stops_when_its_runner_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, CHILD, str(pidfile)])
    child = None
    try:
        child = wait_for(lambda: _pid(pidfile), timeout=30, what="the child to start")
        runner.kill()
        runner.wait(timeout=10)
        wait_for(
            lambda: gone(child),
            timeout=10,
            what=f"the child (pid {child}) to stop after its runner was killed with -9",
        )
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=10)
        if child is not None and not gone(child):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child, signal.SIGKILL)


def test_the_runner_returns_the_childs_status(tmp_path: Path) -> None:
    from rowbus.tree import run_group

    assert run_group([sys.executable, "-c", "raise SystemExit(3)"]) == 3
