from __future__ import annotations

import contextlib
import os
import signal
import sys

from rowbus.local.procs import ProcessRecord, is_ours, launch, port_is_free, stop
from rowbus.waiting import wait_for


def test_a_record_is_ours_only_while_alive_and_with_its_marker(tmp_path):
    marker = str(tmp_path / "marker-dir")
    pid = launch(
        [sys.executable, "-c", "import signal; signal.pause()", marker], tmp_path / "p.log"
    )
    record = ProcessRecord("p", pid, marker, "-")
    # Until the child has exec'd, /proc shows the parent's command line: wait for it.
    wait_for(lambda: is_ours(record), timeout=30, what="the child to run its command")
    assert not is_ours(ProcessRecord("p", pid, str(tmp_path / "other"), "-"))
    record.save(tmp_path / "pids")
    assert ProcessRecord.load(tmp_path / "pids", "p") == record
    stop(record, signal.SIGTERM, grace=10)
    assert not is_ours(record)


def test_stop_escalates_to_kill_when_the_signal_is_ignored(tmp_path):
    marker = str(tmp_path / "stubborn")
    code = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.pause()"
    pid = launch([sys.executable, "-c", code, marker], tmp_path / "s.log")
    record = ProcessRecord("s", pid, marker, "-")
    try:
        # Until the child has exec'd, its command line is still ours (no marker): `stop` would
        # take it for a stranger and leave it running (it ignores SIGTERM and never ends).
        wait_for(lambda: is_ours(record), timeout=30, what="the child to start")
        stop(record, signal.SIGTERM, grace=0.5)
        assert not is_ours(record)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def test_a_missing_record_loads_as_none(tmp_path):
    assert ProcessRecord.load(tmp_path, "nothing") is None


def test_port_is_free_sees_a_listener():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not port_is_free(sock.getsockname()[1])
