"""A spill folder whose disk refuses a write (here: the process's RLIMIT_FSIZE, EFBIG — what a
full disk's ENOSPC is to the same code) stops the subscriber with one line naming the folder
and the setting, and leaves no spill file behind."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys
from pathlib import Path
from rowbus.merge.exceptions import SpillFullError
from rowbus.merge.spill import SpillStore
from rowbus.protocol.events import Op
from rowbus.testing.events import row

store = SpillStore(Path(sys.argv[1]))
events = [(i, row(10, Op.INSERT, after=(i, "v" * 200), index=i)) for i in range(200)]
try:
    for _ in range(100):  # 100 x ~50 KB: past the 256 KB limit
        store.write(events)
except SpillFullError as exc:
    print(f"stopped: {exc}")
finally:
    store.close()
"""


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, resource.RLIM_INFINITY))


def test_a_full_spill_disk_is_one_line_naming_the_folder_and_the_setting(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "spill")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_limit_file_size,
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith(f"stopped: spill folder {tmp_path / 'spill'}/rowbus-spill-")
    assert "File too large after " in line
    assert "set subscriber.spill_dir to a folder with room" in line
    assert list((tmp_path / "spill").iterdir()) == []  # close() removed what it wrote
