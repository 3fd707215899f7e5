"""The suite's own harness (tests/conftest.py, tests/termination.py, tests/proclogs.py), run as a
pytest of its own over tests/unit/harness/cases.py: a SIGTERM ends the run whoever handles it,
and a failing test's report holds the logs of the processes it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rowbus.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CASES = "tests/unit/harness/cases.py"


def _pytest(tmp_path: Path, case: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HARNESS_DIR": str(tmp_path)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-x",
            f"{CASES}::{case}",
            f"{CASES}::test_after",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize(
    "case", ["test_waits_with_its_own_sigterm_handler", "test_waits_under_the_session_handler"]
)
def test_a_sigterm_stops_the_run_after_the_test_it_came_in(tmp_path: Path, case: str) -> None:
    run = _pytest(tmp_path, case)
    try:
        wait_for(
            lambda: (tmp_path / "ready").exists() or run.poll() is not None,
            timeout=120,  # a pytest start: seconds idle, more beside other suites
            what="the inner test to start",
        )
        assert run.poll() is None, run.communicate()[0]
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    assert not (tmp_path / "ran-after").exists(), out
    assert not (tmp_path / "not-interrupted").exists(), out
    assert (tmp_path / "finalized").exists(), out  # the session fixtures were torn down
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "signal 15" in out, out


def test_a_failing_test_reports_the_logs_it_kept(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"{CASES}::test_fails_with_a_crashed_process_log",
        ],
        cwd=ROOT,
        env={**os.environ, "HARNESS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = run.stdout
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "log of reader r-1" in out, out
    # The faulthandler dump, far from the end, and the log's tail are both there.
    assert "Fatal Python error: Segmentation fault" in out, out
    assert 'producer/publisher.py", line 174 in start' in out, out
    assert "last line" in out, out
