from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

import pytest

from rowbus.exceptions import LocalStackError
from rowbus.local.procs import (
    ProcessRecord,
    check_children,
    gone,
    is_ours,
    launch,
    port_is_free,
    stop,
)
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


def _pause_child(tmp_path, name: str, code: str = "import signal; signal.pause()") -> ProcessRecord:
    marker = str(tmp_path / name)
    pid = launch([sys.executable, "-c", code, marker], tmp_path / f"{name}.log")
    record = ProcessRecord(name, pid, marker, "-")
    wait_for(lambda: is_ours(record), timeout=30, what=f"{name} to run its command")
    return record


def test_stop_returns_only_once_the_process_is_gone(tmp_path):
    # On SIGTERM the child replaces its command line (as an exiting process empties it) and
    # lives on until the test releases it (it blocks opening a FIFO for reading): `stop` must
    # wait for the pid, not for the marker to vanish.
    ready = tmp_path / "handler-installed"
    release = tmp_path / "release"
    os.mkfifo(release)
    code = (
        "import os, pathlib, signal, sys\n"
        "def later(*_):\n"
        "    os.execv(sys.executable, [sys.executable, '-c', "
        f"{f'open({str(release)!r}).read()'!r}])\n"
        "signal.signal(signal.SIGTERM, later)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "signal.pause()\n"
    )
    record = _pause_child(tmp_path, "lingering", code)
    released = threading.Event()

    def release_once_lingering() -> None:
        # The marker is gone from its command line, the process is not: now let it end.
        wait_for(lambda: not is_ours(record), timeout=30, what="the child to exec")
        assert not gone(record.pid)
        released.set()
        with open(release, "w"):
            pass

    releaser = threading.Thread(target=release_once_lingering, daemon=True)
    try:
        wait_for(ready.exists, timeout=30, what="the child's SIGTERM handler")
        releaser.start()
        stop(record, signal.SIGTERM, grace=20)
        assert released.is_set(), "stop returned before the lingering child was let go"
        assert gone(record.pid), f"stop returned while pid {record.pid} still runs"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
        if releaser.ident is not None:
            releaser.join(30)


def test_a_parent_names_how_its_child_ended_and_stops_the_others(tmp_path):
    crashed = _pause_child(tmp_path, "crashed")
    # "failed" exits with status 3 when told to (SIGUSR1), once its handler is installed.
    armed = tmp_path / "failed-armed"
    failed = _pause_child(
        tmp_path,
        "failed",
        "import pathlib, signal, sys\n"
        "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(3))\n"
        f"pathlib.Path({str(armed)!r}).touch()\n"
        "signal.pause()\n",
    )
    sibling = _pause_child(tmp_path, "sibling")
    try:
        check_children([crashed, sibling], tmp_path)  # all running: nothing to say
        os.kill(crashed.pid, signal.SIGKILL)
        wait_for(lambda: gone(crashed.pid), timeout=10, what="the killed child to end")
        with pytest.raises(LocalStackError) as caught:
            check_children([crashed, sibling], tmp_path)
        line = str(caught.value)
        assert f"crashed (pid {crashed.pid}) exited with signal 9 (SIGKILL)" in line, line
        assert "stopped sibling" in line, line
        assert gone(sibling.pid)
        wait_for(armed.exists, timeout=30, what="the failing child's handler")
        os.kill(failed.pid, signal.SIGUSR1)
        wait_for(lambda: gone(failed.pid), timeout=10, what="the failing child to end")
        with pytest.raises(LocalStackError, match=r"failed \(pid \d+\) exited with status 3"):
            check_children([failed], tmp_path)
    finally:
        for record in (crashed, failed, sibling):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)


def test_a_launched_child_is_ours_as_soon_as_launch_returns(tmp_path):
    # Popen returns while the child may still be inside exec (its /proc command line empty):
    # a supervisor checking at once took a starting child for exited (`rowbus demo`:
    # "reader-source2 exited; …log:" with an empty log).
    for i in range(20):
        marker = str(tmp_path / f"child-{i}")
        pid = launch(
            [sys.executable, "-c", "import signal; signal.pause()", marker], tmp_path / "c.log"
        )
        try:
            assert is_ours(ProcessRecord("c", pid, marker, "-")), f"launch {i}: not ours"
        finally:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda pid=pid: gone(pid), timeout=10, what="the child to end")


def test_exit_status_waits_for_the_child_and_gives_its_code(tmp_path):
    from rowbus.local.procs import exit_status

    pid = launch([sys.executable, "-c", "import sys; sys.exit(3)"], tmp_path / "e.log")
    assert exit_status(pid, 30) == 3
    running = launch([sys.executable, "-c", "import signal; signal.pause()"], tmp_path / "r.log")
    try:
        assert exit_status(running, 0.1) is None
    finally:
        os.kill(running, signal.SIGTERM)
    assert exit_status(running, 30) == -signal.SIGTERM
    assert exit_status(os.getpid(), 1) is None  # not started here
