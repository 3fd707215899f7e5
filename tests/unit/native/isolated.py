"""Runs a snippet in a child interpreter: a native bug can crash (SIGSEGV) or never return, and
a regression test must then fail on its own instead of taking the test session down with it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

LIMIT = 120.0
"""Seconds a snippet may take: each one is a single call that returns at once when fixed."""


def run(code: str) -> str:
    """The snippet's stdout; fails the test when the child dies, hangs or raises."""
    code = textwrap.dedent(code)
    if os.environ.get("ROWBUS_SANITIZED_BUILD"):
        # Under `python -m benchmarks.fuzz unit`: the child loads the sanitized build too.
        code = "import benchmarks.fuzz.sanitized\n" + code
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the native call did not return in {LIMIT} s") from exc
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-4000:]}"
    return done.stdout
