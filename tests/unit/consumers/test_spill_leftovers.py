"""The spill folders of processes killed -9 are removed by the next store on the same host and
folder; a live process's folder and anything not named as a store names its folders stay."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from rowbus.merge.spill import PREFIX, SpillStore
from rowbus.protocol.events import Op
from rowbus.testing.events import row

CHILD = """
import sys
from pathlib import Path
from rowbus.merge.spill import SpillStore
from rowbus.protocol.events import Op
from rowbus.testing.events import row

store = SpillStore(Path(sys.argv[1]))
store.write([(0, row(10, Op.INSERT, after=(0, "v"), index=0))])
print("spilled", flush=True)
sys.stdin.readline()  # killed here, before any close
"""


def test_a_killed_processs_folder_is_removed_by_the_next_store(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "spilled\n"
    [left] = list(tmp_path.iterdir())
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert left.exists() and any(left.iterdir())  # kill -9 deletes nothing
    live = tmp_path / f"{PREFIX}{socket.gethostname()}.{os.getppid()}.abc"
    other = tmp_path / f"{PREFIX}x7k2"  # not named by a store of this version: not ours to judge
    live.mkdir()
    other.mkdir()

    store = SpillStore(tmp_path)
    store.write([(0, row(10, Op.INSERT, after=(1, "w"), index=0))])
    try:
        assert not left.exists()
        assert live.exists() and other.exists()
        [own] = [f for f in tmp_path.iterdir() if f not in (live, other)]
        assert own.name.startswith(f"{PREFIX}{socket.gethostname()}.{os.getpid()}.")
    finally:
        store.close()
