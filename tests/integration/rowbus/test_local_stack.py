"""`rowbus local up | down | status` on a stack of its own (not the session's test stack)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rowbus.config import load_settings
from rowbus.exceptions import PortInUseError
from rowbus.local.procs import ProcessRecord, is_ours
from rowbus.local.stack import LocalStack


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def stack_settings(state_dir: Path, ports: list[int]):
    names = ["kafka", "zookeeper", "source1", "source2", "sink"]
    return load_settings(
        None, local={"state_dir": str(state_dir), "ports": dict(zip(names, ports, strict=True))}
    )


def test_up_is_idempotent_and_down_leaves_no_process(tmp_path):
    stack = LocalStack(stack_settings(tmp_path / "state", free_ports(5)))
    first = stack.up()
    try:
        assert sorted(first.started) == ["kafka", "sink", "source1", "source2", "zookeeper"]
        assert [s.state for s in stack.status()] == ["up"] * 5
        second = stack.up()
        assert second.started == []
        assert sorted(second.already_running) == sorted(first.started)
        records = [ProcessRecord.load(stack.pid_dir, s.name) for s in stack.services]
        assert all(r is not None and is_ours(r) for r in records)
    finally:
        stopped = stack.down()
    assert sorted(stopped) == ["kafka", "sink", "source1", "source2", "zookeeper"]
    assert not any(is_ours(r) for r in records if r is not None)
    assert [s.state for s in stack.status()] == ["down"] * 5
    assert stack.down() == []


def test_a_taken_port_names_its_setting_and_starts_nothing(tmp_path):
    ports = free_ports(5)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", ports[0]))
    blocker.listen()
    stack = LocalStack(stack_settings(tmp_path / "state", ports))
    try:
        with pytest.raises(PortInUseError, match=rf"port {ports[0]} .*local\.ports\.kafka"):
            stack.up()
        assert [s.state for s in stack.status()] == ["down"] * 5
    finally:
        blocker.close()
        stack.down()


def test_a_start_that_fails_half_way_leaves_nothing_running(tmp_path, monkeypatch):
    """The last service dies at start-up: the ones this call already started are stopped, and
    the error names the service."""
    from rowbus.exceptions import LocalStackError

    stack = LocalStack(stack_settings(tmp_path / "state", free_ports(5)))
    broker = stack.services[-1]
    monkeypatch.setattr(broker, "command", lambda: ["false"])
    with pytest.raises(LocalStackError, match="kafka exited during start-up"):
        stack.up()
    records = [ProcessRecord.load(stack.pid_dir, s.name) for s in stack.services]
    assert records == [None] * 5, "every pid record is gone"
    assert [s.state for s in stack.status()] == ["down"] * 5
    state = str((tmp_path / "state").resolve()).encode()
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state in cmdline and status != "Z":
            alive.append(cmdline.replace(b"\0", b" ").decode()[:120])
    assert alive == [], alive
