"""The apply driver's kill points at a step's commit (`rowbus.spark_apply.apply_faults`)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rowbus.spark_apply.apply_faults import ENV, armed
from rowbus.spark_apply.exceptions import ApplyError


def test_unset_arms_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert armed() is None


@pytest.mark.parametrize("spec", ["kill:5", "kill-before-commit:0", "kill-after-commit", "x:y"])
def test_a_spec_that_does_not_parse_is_refused_in_one_line(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, spec)
    with pytest.raises(ApplyError, match=r"^ROWBUS_APPLY_FAULT=.*expected <action>:<n>"):
        armed()


def test_it_lets_the_other_commits_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "kill-after-commit:2")
    fault = armed()
    assert fault is not None
    fault.at_commit(0, 0, False)  # before a commit: not this action's moment
    fault.at_commit(0, 0, True)  # the first commit
    fault.at_commit(1, 0, False)


@pytest.mark.parametrize(
    ("spec", "calls", "line"),
    [
        (
            "kill-before-commit:2",
            "f.at_commit(0, 0, False); f.at_commit(0, 0, True); f.batch_started(2); "
            "f.at_commit(1, 0, True); f.at_commit(1, 0, False)",
            "before the commit of batch 1 step 0 (Spark runs the next batch)",
        ),
        (
            # no next batch: the hold ends at its deadline and the kill lands all the same
            "kill-before-commit:1",
            "faults.HOLD_S = 0.2; f.batch_started(3); f.at_commit(3, 1, False)",
            "before the commit of batch 3 step 1\n",
        ),
        (
            "kill-after-commit:2",
            "f.at_commit(0, 0, True); f.at_commit(1, 0, False); f.at_commit(1, 0, True)",
            "after the commit of batch 1 step 0",
        ),
    ],
)
def test_it_kills_the_process_at_the_nth_step_commit_with_a_line_first(
    spec: str, calls: str, line: str
) -> None:
    code = (
        "import logging; logging.basicConfig();"
        "from rowbus.spark_apply import apply_faults as faults;"
        f"f = faults.armed(); {calls};"
        "print('survived')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={ENV: spec, "PATH": ""},
        cwd=Path(__file__).parents[3],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done
    assert "survived" not in done.stdout
    assert f"SIGKILL of the driver {line}" in done.stderr
