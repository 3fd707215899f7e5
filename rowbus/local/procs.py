"""Processes the local stack starts: launch detached, record, recognise and stop by recorded pid.

A pid file alone is not proof: the pid may have been reused. A recorded process is ours only if
it is alive (not a zombie) and its command line still contains the marker recorded with it
(the service's private data folder), so `down` never signals a stranger.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from rowbus.exceptions import LocalStackError, PortInUseError
from rowbus.waiting import wait_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    marker: str
    address: str

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{self.name}.json.tmp"
        tmp.write_text(json.dumps(asdict(self)), encoding="utf-8")
        tmp.replace(folder / f"{self.name}.json")

    @classmethod
    def load(cls, folder: Path, name: str) -> ProcessRecord | None:
        path = folder / f"{name}.json"
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise LocalStackError(f"{path}: unreadable pid record ({exc}); remove it") from exc

    @staticmethod
    def forget(folder: Path, name: str) -> None:
        (folder / f"{name}.json").unlink(missing_ok=True)


def is_ours(record: ProcessRecord) -> bool:
    """True while the recorded process runs and is still the one we started."""
    fields = _stat(record.pid)
    if fields is None:
        return False
    if fields[0] in {"Z", "X"}:
        _reap(record.pid)
        return False
    return record.marker.encode() in _cmdline(record.pid).replace(b"\0", b" ")


_children: dict[int, subprocess.Popen[bytes]] = {}
"""Every process `launch` started, by pid: kept so that its exit status is ours to read (a
dropped Popen is reaped by the subprocess module's next launch, its status lost)."""


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None:
        child.poll()
        return
    # Only our own children can be reaped; for others waitpid raises and that is fine.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first); None if none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[-1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def started_at(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot): with the pid, names one process for good."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


def gone(pid: int, started: str | None = None) -> bool:
    """True once `pid` has exited (reaped, or a zombie that holds nothing any more), or the pid
    names another process than the one `started` then. Unlike `is_ours` it does not look at
    the command line, which an exiting process empties before it has released its files and
    ports."""
    fields = _stat(pid)
    if fields is None or (started is not None and fields[19] != started):
        return True
    if fields[0] in {"Z", "X"}:
        _reap(pid)
        return True
    return False


def exit_description(pid: int) -> str:
    """How a process `launch` started ended: "exited with status 1", "exited with signal 11
    (SIGSEGV)"; "exited" when that is unknown (not started here)."""
    child = _children.get(pid)
    code = None if child is None else child.poll()
    if code is None:
        return "exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"exited with signal {-code} ({name})"
    return f"exited with status {code}"


def exit_status(pid: int, timeout: float) -> int | None:
    """The exit status of a process `launch` started (negative: the signal that ended it),
    waiting up to `timeout` seconds for it to end; None when it is still running then, or
    was not started here. (A blocking wait: `Popen.poll` answers None while another thread
    holds the child's wait lock, which `exit_description` then reports as a bare "exited".)"""
    child = _children.get(pid)
    if child is None:
        return None
    try:
        return child.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def launch(args: list[str], log_file: Path, env: dict[str, str] | None = None) -> int:
    """Start a detached process (own session) with output to `log_file`; return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    _children[proc.pid] = proc
    # Popen returns while the kernel may still be inside the child's exec, and meanwhile
    # /proc shows an empty command line: `is_ours` would take the child for exited (seen:
    # 12 of 40 launches; `rowbus demo` then reported a reader that was starting as exited,
    # with an empty log).
    wait_for(
        lambda: proc.poll() is not None or bool(_cmdline(proc.pid)),
        timeout=10,
        what=f"{args[0]} to start",
    )
    return proc.pid


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def stop(record: ProcessRecord, sig: signal.Signals, grace: float) -> None:
    """Signal the recorded process and return once it is gone (its pid exited, not merely its
    command line changed), KILLing it after `grace` seconds."""
    if not is_ours(record):
        return
    log.info("stopping %s (pid %s) with %s", record.name, record.pid, sig.name)
    started = started_at(record.pid)
    _signal(record.pid, sig)
    try:
        wait_for(lambda: gone(record.pid, started), timeout=grace, what=f"{record.name} to exit")
    except LocalStackError:
        raise
    except Exception:  # noqa: BLE001 - escalate on any timeout
        log.warning(
            "%s (pid %s) still running %.0fs after %s; sending SIGKILL",
            record.name,
            record.pid,
            grace,
            sig.name,
        )
        _signal(record.pid, signal.SIGKILL)
        wait_for(lambda: gone(record.pid, started), timeout=10, what=f"{record.name} to die")


def stop_all(records: list[ProcessRecord], sig: signal.Signals, grace: float) -> None:
    """`stop` each record (in the order given), all of them whatever one raises."""
    for record in records:
        try:
            stop(record, sig, grace)
        except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
            log.warning("stopping %s (pid %s): %s", record.name, record.pid, exc)


def check_children(records: list[ProcessRecord], logs: Path, grace: float = 30.0) -> None:
    """For a parent supervising `records` (its own children, logging to ``logs/<name>.log``):
    if one has exited, stop the others and raise one line naming it, how it ended and its
    log's last lines."""
    for record in records:
        if is_ours(record):
            continue
        how = exit_description(record.pid)
        others = [r for r in records if r is not record]
        stop_all(others, signal.SIGTERM, grace)
        path = logs / f"{record.name}.log"
        try:
            tail = path.read_text(errors="replace").strip().splitlines()[-3:]
        except FileNotFoundError:
            tail = ["(no log)"]
        stopped = f"; stopped {', '.join(r.name for r in others)}" if others else ""
        raise LocalStackError(
            f"{record.name} (pid {record.pid}) {how}{stopped}; {path}: {' | '.join(tail)}"
        )


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def require_free_port(port: int, setting: str) -> None:
    if not port_is_free(port):
        raise PortInUseError(
            f"port {port} on 127.0.0.1 is already in use; set {setting} to a free port "
            f"(in rowbus.yaml or as ROWBUS_{setting.upper().replace('.', '__')})"
        )


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
