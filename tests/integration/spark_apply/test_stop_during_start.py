"""A stop that comes while Spark is starting ends the job and its JVM within a bounded time
(issue #33: a job whose `rowbus apply` died with it got the parent-death SIGTERM while its JVM
started, and it and the JVM stayed alive 80 s, until Spark was up)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.spark_apply.__main__ import START_UP_STOP_S
from rowbus.waiting import wait_for
from tests.integration.spark_apply.test_spark_apply import job_config


def _children_named(parent: int, name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if (entry / "comm").read_text().strip() != name:
                    continue
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == parent and fields[0] not in {"Z", "X"}:
                    found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split() or ["X"])[0]
    except OSError:
        return False
    return state not in {"Z", "X"}


def _sockets(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def _tcp() -> list[list[str]]:
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            rows += [line.split() for line in Path(table).read_text().splitlines()[1:]]
    return rows


def _talking(driver: int, jvm: int) -> bool:
    """The driver holds a connection to a port its JVM listens on: it is inside a py4j call
    the JVM answers."""
    rows, theirs, ours = _tcp(), _sockets(jvm), _sockets(driver)
    ports = {r[1].rsplit(":", 1)[1] for r in rows if r[3] == "0A" and r[9] in theirs}
    if not any(r[3] == "01" and r[9] in ours and r[2].rsplit(":", 1)[1] in ports for r in rows):
        return False
    try:  # the main thread waits for an answer (recvfrom: 45 on x86-64)
        return Path(f"/proc/{driver}/syscall").read_text().split()[0] == "45"
    except (OSError, IndexError):
        return False


def _gone() -> list[int]:
    raise AssertionError("the job ended before its JVM started")


@pytest.mark.parametrize("moment", ["jvm-starting", "gateway-up"])
def test_sigterm_while_spark_starts_ends_the_driver_and_its_jvm(
    moment: str,
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic = make_topic("startstop", partitions=1)
    config = job_config(services, unique("startstop"), [topic], topic, [], tmp_path / "ckpt")
    path = tmp_path / "job.json"
    path.write_text(config.dump())
    driver = subprocess.Popen(
        [sys.executable, "-m", "rowbus.spark_apply", "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test ends whatever is left, by group
    )
    jvms: list[int] = []
    try:
        jvms = wait_for(
            lambda: _children_named(driver.pid, "java") if driver.poll() is None else _gone(),
            timeout=120,
            what="the job's JVM",
            stop_on=(AssertionError,),
        )
        if moment == "gateway-up":
            # The driver is inside a py4j call the JVM answers: py4j logged its broken
            # connection as a whole trace on the root logger (20 lines for one stop).
            wait_for(
                lambda: any(_talking(driver.pid, j) for j in jvms), timeout=120, what="a py4j call"
            )
        # The JVM is starting (Spark answers nothing before it is up): the stop comes now.
        driver.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        _out, err = driver.communicate(timeout=START_UP_STOP_S + 25)
        assert driver.returncode == 128 + signal.SIGTERM, err
        # The stop is said in one line; what py4j and Spark log as their JVM goes is noise.
        assert "Traceback" not in err and len(err.splitlines()) <= 5, err
        bound = START_UP_STOP_S + 10
        wait_for(
            lambda: not any(_alive(j) for j in jvms),
            timeout=max(0.1, stopped_at + bound - time.monotonic()),
            what=f"the JVM's end within {bound:.0f} s of the stop",
        )
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(driver.pid, signal.SIGKILL)
        for jvm in jvms:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(jvm, signal.SIGKILL)
        driver.wait(timeout=30)
