"""The reader's kill points mid-snapshot (`rowbus.producer.faults`): when they fire, when not."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rowbus.producer.exceptions import ReaderError
from rowbus.producer.faults import ENV, armed
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint

AT = BinlogPosition("bin.000001", 4, "0-1-1")


def _checkpoint(seq: int | None, done: bool = False) -> ReaderCheckpoint:
    snapshot = None
    if seq is not None:
        state = SnapshotState.start(AT, [], {})
        state.seq, state.done = seq, done
        snapshot = state.to_json()
    return ReaderCheckpoint(
        source="s1",
        position=AT,
        gtid_set=None,
        ts=1,
        offsets=(),
        reader_id="reader-a",
        epoch=1,
        snapshot=snapshot,
    )


def test_unset_arms_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert armed() is None


@pytest.mark.parametrize("spec", ["kill:5", "kill-in-snapshot:0", "kill-in-snapshot", "x:y"])
def test_a_spec_that_does_not_parse_is_refused_in_one_line(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, spec)
    with pytest.raises(ReaderError, match=r"^ROWBUS_READER_FAULT=.*expected <action>:<rows>"):
        armed()


def test_it_lets_every_transaction_below_the_row_count_and_after_the_snapshot_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "kill-in-snapshot:100")
    fault = armed()
    assert fault is not None
    fault(_checkpoint(None), False)  # streaming, no snapshot
    fault(_checkpoint(99), False)  # below the count
    fault(_checkpoint(5_000, done=True), False)  # the snapshot is over: its last commit
    fault(_checkpoint(100), True)  # past the count, but committed: not its moment


@pytest.mark.parametrize(
    ("spec", "calls", "line"),
    [
        (
            "kill-in-snapshot:100",
            "fault(_checkpoint(99), False); fault(_checkpoint(100), True); "
            "fault(_checkpoint(100), False)",
            "up to 100 delivered in an open transaction, not committed",
        ),
        (
            "kill-after-snapshot:100",
            "fault(_checkpoint(99), True); fault(_checkpoint(100), False); "
            "fault(_checkpoint(100), True)",
            "up to 100 committed",
        ),
    ],
)
def test_it_kills_the_process_at_the_row_count_with_a_line_first(
    spec: str, calls: str, line: str
) -> None:
    code = (
        "import logging; logging.basicConfig();"
        "from tests.unit.producer.test_faults import _checkpoint;"
        "from rowbus.producer.faults import armed;"
        f"fault = armed(); {calls};"
        "print('survived')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env={ENV: spec, "PATH": ""},
        cwd=Path(__file__).parents[3],  # the checkout: the test's own module is importable
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done
    assert "survived" not in done.stdout
    assert f"SIGKILL of reader reader-a with snapshot rows {line}" in done.stderr
