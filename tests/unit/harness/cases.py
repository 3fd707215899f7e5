"""Tests that `test_session_harness` runs in a pytest of their own (not collected by the suite:
the file name does not start with ``test_``). They talk to the outer test through files in
$HARNESS_DIR."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import proclogs

DIR = Path(os.environ.get("HARNESS_DIR", "."))


@pytest.fixture(scope="session")
def stack() -> Iterator[None]:
    """Stands for the `services` fixture: its teardown is what stops the stack."""
    yield
    (DIR / "finalized").write_text("")


def test_waits_with_its_own_sigterm_handler(stack: None) -> None:
    """As `rowbus reader run` does in-process: its handler stops it, gracefully."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    (DIR / "ready").write_text("own")
    assert stop.wait(60), "no SIGTERM came"
    (DIR / "stopped").write_text("own")


def test_waits_under_the_session_handler(stack: None) -> None:
    (DIR / "ready").write_text("session")
    threading.Event().wait(60)
    (DIR / "not-interrupted").write_text("")


def test_after() -> None:
    (DIR / "ran-after").write_text("")


def test_fails_with_a_crashed_process_log() -> None:
    log = DIR / "reader.log"
    log.write_text(
        "starting\nFatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent "
        'call first):\n  File "producer/publisher.py", line 174 in start\n'
        + "noise\n" * 2000
        + "last line\n"
    )
    proclogs.keep(log, "reader r-1")
    raise AssertionError("the reader died")
