"""A native crash of a rowbus process leaves its Python stacks in the process's log.

The reader once died with SIGSEGV and an empty log (issue: a reader that cannot segfault): with
faulthandler on from the first line of every entry point, the next such crash says where.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_CRASH = """
import ctypes, sys
from {module} import main
try:
    main({argv!r})
except SystemExit:
    pass
ctypes.string_at(0)  # a read through a null pointer, as the reader's crash was
"""


@pytest.mark.parametrize(
    ("module", "argv"),
    [("rowbus.cli", ["--version"]), ("rowbus.spark_apply.__main__", ["--help"])],
)
def test_a_segfault_after_an_entry_point_started_prints_the_stack(
    module: str, argv: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    done = subprocess.run(
        [sys.executable, "-c", _CRASH.format(module=module, argv=argv)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -11, done
    err = done.stderr.decode(errors="replace")
    assert "Fatal Python error: Segmentation fault" in err, err
    assert 'File "<string>", line 8' in err, err
