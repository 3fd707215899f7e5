"""SIGTERM to `rowbus apply` stops its whole process tree — the job's driver, its JVM and its
Python workers — within the grace period, and nothing is left running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rowbus.config import Settings
from rowbus.waiting import wait_for
from tests.integration.producer.test_metrics import free_port, scrape


def _children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for kid in _children_of(todo.pop()):
            found.append(kid)
            todo.append(kid)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in {"Z", "X"}


def _cmdline(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode()
    except OSError:
        return ""


def test_sigterm_to_rowbus_apply_leaves_nothing_running(
    services: Settings, unique, tmp_path: Path
) -> None:
    port = free_port()
    config = {
        "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
        "zookeeper": {"hosts": services.zookeeper.hosts},
        "sources": [{"name": s.name, "host": s.host, "port": s.port} for s in services.sources],
        "sink": {"host": services.resolved_sink.host, "port": services.resolved_sink.port},
        "apply": {
            "job": unique("stop"),
            "state_database": unique("rowbus_stop"),
            "checkpoint_location": str(tmp_path / "cp"),
            "topic_template": unique("test.stop") + ".{source}",
            "metrics_port": port,
        },
    }
    path = tmp_path / "rowbus.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (tmp_path / "apply.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rowbus", "-c", str(path), "apply"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def jvm_started() -> list[int] | None:
            if proc.poll() is not None:
                raise AssertionError(
                    f"rowbus apply exited early:\n{(tmp_path / 'apply.log').read_text()}"
                )
            tree = _descendants(proc.pid)
            return tree if any("java" in _cmdline(pid) for pid in tree) else None

        tree = wait_for(jvm_started, timeout=180, what="the apply job's JVM to start")
        # A running job serves its metrics (apply.metrics_port).
        text = wait_for(
            lambda: "rowbus_apply_batches_total" in scrape(port) and scrape(port),
            timeout=180,
            what="the apply job's metrics endpoint",
        )
        assert "rowbus_apply_rows_applied_total" in text
        assert "rowbus_apply_stash_events" in text
        # Let the job get going (its Python workers start with the first micro-batch).
        wait_for(
            lambda: len(_descendants(proc.pid)) >= len(tree),
            timeout=30,
            what="the job's processes",
        )
        tree = _descendants(proc.pid)
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        status = proc.wait(timeout=120)
        wait_for(
            lambda: not [pid for pid in tree if _alive(pid)],
            timeout=30,
            what=f"every process of rowbus apply's tree {tree} to end",
        )
        assert time.monotonic() - started < 120
        assert status in (0, 128 + signal.SIGTERM), status
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
