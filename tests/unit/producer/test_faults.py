"""The reader's kill points mid-snapshot and mid-fragments (`rowbus.producer.faults`): when they
fire, when not."""

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
    with pytest.raises(ReaderError, match=r"^ROWBUS_READER_FAULT=.*expected <action>:<n>"):
        armed()


def test_it_lets_every_transaction_below_the_row_count_and_after_the_snapshot_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "kill-in-snapshot:100")
    fault = armed()
    assert fault is not None
    fault(_checkpoint(None), None)  # streaming, no snapshot
    fault(_checkpoint(99), None)  # below the count
    fault(_checkpoint(5_000, done=True), None)  # the snapshot is over: its last commit, streaming
    fault(_checkpoint(None), AT)  # a fragment, not a snapshot


def test_the_fragment_kill_lets_the_fragments_before_it_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, "kill-in-fragments:3")
    fault = armed()
    assert fault is not None
    for _ in range(5):
        fault(_checkpoint(None), None)  # transactions without a fragment do not count
    fault(_checkpoint(None), AT)
    fault(_checkpoint(500), AT)  # the second fragment


@pytest.mark.parametrize(
    ("spec", "calls", "line"),
    [
        (
            "kill-in-snapshot:100",
            "fault(_checkpoint(99), None); fault(_checkpoint(100), None)",
            "with snapshot rows up to 100",
        ),
        (
            "kill-in-fragments:2",
            "fault(_checkpoint(None), AT); fault(_checkpoint(None), None); "
            "fault(_checkpoint(None), AT)",
            "with fragment 2 ending at binlog bin.000001:4 gtid=0-1-1",
        ),
    ],
)
def test_it_kills_the_process_at_its_point_with_a_line_first(
    spec: str, calls: str, line: str
) -> None:
    code = (
        "import logging; logging.basicConfig();"
        "from tests.unit.producer.test_faults import AT, _checkpoint;"
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
    assert f"SIGKILL of reader reader-a {line} delivered in an open transaction" in done.stderr
