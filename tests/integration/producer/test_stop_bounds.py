"""A reader's stop is complete and bounded (issue #33): once it has stopped, none of its Kafka
clients is left (their librdkafka threads end with it, not whenever they are collected); and
SIGTERM ends a reader within ``reader.stop_timeout_s`` even when its broker and ZooKeeper are
gone, saying so in one line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from rowbus.local.procs import ProcessRecord, gone
from rowbus.local.stack import LocalStack
from rowbus.waiting import wait_for
from tests.conftest import librdkafka_threads
from tests.faults.proxy import Proxy
from tests.integration.bounded.helpers import create_big_table, insert_big_transaction
from tests.integration.producer.helpers import (
    ROOT,
    ReaderSetup,
    reader_thread,
    start_reader_process,
)
from tests.integration.rowbus.test_local_stack import free_ports, stack_settings


def _connections_to(port: int) -> int:
    """This process's established TCP connections to `port` on any host."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


def test_a_stopped_reader_leaves_no_kafka_client_behind(reader_setup: ReaderSetup) -> None:
    broker_port = int(reader_setup.services.kafka.bootstrap_servers.split(",")[0].rsplit(":")[1])
    ports = {"the broker": broker_port, "the source": reader_setup.server.port}
    connected = {what: _connections_to(port) for what, port in ports.items()}
    before = len(librdkafka_threads())
    # Frequent heartbeats and stall checks: the reader builds every client it has (the
    # producer, the admin client of the stall check) before it is stopped.
    with reader_thread(reader_setup, heartbeat_interval_s=0.3, stall_check_s=0.5) as reader:
        wait_for(lambda: reader.metrics.batches >= 4, timeout=60, what="the reader's heartbeats")
        assert len(librdkafka_threads()) > before
        assert all(_connections_to(port) > connected[w] for w, port in ports.items())
    commits = [t for t in threading.enumerate() if t.name == "rowbus-commit"]
    assert not commits, commits
    wait_for(
        lambda: len(librdkafka_threads()) <= before,
        timeout=10,
        what="the stopped reader's librdkafka threads to end",
    )
    for what, port in ports.items():
        wait_for(
            lambda port=port, what=what: _connections_to(port) <= connected[what],
            timeout=10,
            what=f"the stopped reader's connections to {what} (port {port}) to close",
        )


def test_sigterm_stops_a_reader_whose_broker_and_zookeeper_are_gone(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    # A private broker (the session's is shared) and ZooKeeper through a proxy that can be cut.
    stack = LocalStack(stack_settings(tmp_path / "broker", free_ports(5)))
    stack.services = [s for s in stack.services if s.name == "kafka"]
    with ExitStack() as cleanup:
        # Registered before `up`: a broker that started is stopped whatever fails after.
        cleanup.callback(stack.down)
        stack.up()
        _sigterm_with_services_gone(reader_setup, tmp_path, stack, cleanup)


def _sigterm_with_services_gone(
    reader_setup: ReaderSetup, tmp_path: Path, stack: LocalStack, cleanup: ExitStack
) -> None:
    (broker,) = stack.services
    zk_host, zk_port = reader_setup.services.zookeeper.hosts.split(",")[0].rsplit(":", 1)
    proxy = Proxy((zk_host, int(zk_port)))
    cleanup.callback(proxy.close)
    bound_s = 4.0
    path = reader_setup.write_config(
        tmp_path / "rowbus.yaml", stop_timeout_s=bound_s, heartbeat_interval_s=0.2
    )
    config = yaml.safe_load(path.read_text())
    config["kafka"]["bootstrap_servers"] = broker.address
    config["zookeeper"]["hosts"] = f"127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "reader.log"
    proc = start_reader_process(path, reader_setup.source, "bounded", log)
    try:

        def took_over() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the reader exited early:\n{log.read_text()}")
            return "took over" in log.read_text()

        wait_for(took_over, timeout=60, what="the reader to lead", stop_on=(AssertionError,))
        record = ProcessRecord.load(stack.pid_dir, "kafka")
        assert record is not None
        assert stack.down() == ["kafka"]
        # `local down` returns once the broker's process is gone, not merely going.
        assert gone(record.pid), f"the broker (pid {record.pid}) still runs after down"
        proxy.cut()
        started = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        status = proc.wait(timeout=bound_s + 20)
        elapsed = time.monotonic() - started
        text = log.read_text()
        assert elapsed < bound_s + 5, f"stopped after {elapsed:.1f}s:\n{text}"
        assert text.count("signal 15: finishing the open batch and stopping") == 1, text
        if status != 0:
            # Held by the missing services: the deadline ended it, in one line.
            assert status == 1, text
            assert text.count(f"still running {bound_s:.0f}s after signal 15") == 1, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_term_changes_and_stops_racing_the_commit_thread_run_clean(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    """The stress that could expose a client used after it is closed (issue #33: a reader died
    with SIGSEGV in librdkafka): terms lost every few hundred milliseconds and readers stopped
    while big transactions are published in fragments, in a process with faulthandler. Five
    readers, each stopped in its 4th to 6th term (at least 20 terms in all), however long a
    busy machine takes to run them (each reader's terms are waited for, up to a deadline)."""
    server = reader_setup.server
    create_big_table(server, reader_setup.database)
    spec = {
        "source": {
            "name": reader_setup.source,
            "host": server.host,
            "port": server.port,
            "user": server.user,
            "password": server.password.get_secret_value(),
        },
        "kafka": reader_setup.services.kafka.client_config(),
        "reader": reader_setup.reader_settings(
            fragment_rows=300, flush_interval_s=0.05, heartbeat_interval_s=0.1, stall_check_s=0.05
        ),
        "readers": 5,
        "reader_timeout_s": 60,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = threading.Event()

    def write() -> None:
        first = 1
        while not done.is_set() and first < 2_000_000:
            insert_big_transaction(server, reader_setup.database, 2_000, first)
            first += 2_000

    writer = threading.Thread(target=write, name="big-transactions", daemon=True)
    writer.start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-X",
                "faulthandler",
                "-m",
                "tests.integration.producer.term_stress",
                str(tmp_path / "spec.json"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            # every reader's deadline and its stop, and the process's start and end
            timeout=5 * (60 + 30) + 60,
            check=False,
        )
    finally:
        done.set()
        writer.join(60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the stress ended with status {proc.returncode}:\n{out[-5000:]}"
    assert "Fatal Python error" not in out, out[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"] == [], result
    assert result["readers"] == 5 and result["terms"] >= 20, result
    assert result["librdkafka_threads"] == [], result


def test_a_stop_held_past_its_deadline_ends_the_process_in_one_line(tmp_path: Path) -> None:
    """Whatever holds the stop (here a main thread blocked for good), the process exits
    ``reader.stop_timeout_s`` after the signal, with status 1 and one line."""
    ready = tmp_path / "ready"
    code = (
        "import logging, pathlib, threading\n"
        "from rowbus.commands.reader import _stop_on_signals\n"
        "logging.basicConfig()\n"
        "_stop_on_signals(1.0)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "threading.Event().wait()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(ready.exists, timeout=30, what="the process to handle signals")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)  # a second signal changes nothing
        _, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert 1.0 <= elapsed < 6, elapsed
    assert err.count("signal 15: finishing the open batch and stopping (at most 1s)") == 1, err
    assert err.count("still running 1s after signal 15 (reader.stop_timeout_s)") == 1, err
