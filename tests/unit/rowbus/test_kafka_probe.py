"""The readiness probe of the embedded broker (`rowbus.local.services.kafka_answers`) leaves no
Kafka client behind when it fails.

A failed probe raised the client's own error, whose traceback runs through the client's
Python frames (``AdminClient.list_topics``); the waiter keeps its last error (to explain a
timeout), so the client stayed alive and went on reconnecting to the broker, logging "Connect
to … failed" long after the probe had failed. Found by the nemesis (`benchmarks.nemesis`) after a broker restart.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rowbus.local.services import kafka_answers


def _rdkafka_threads() -> int:
    names = (t / "comm" for t in Path("/proc/self/task").iterdir())
    return sum(1 for n in names if n.read_text().startswith("rdk:"))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failed_probe_keeps_no_client_alive() -> None:
    before = _rdkafka_threads()
    with pytest.raises(ConnectionError) as failed:
        kafka_answers(f"127.0.0.1:{_closed_port()}")
    kept = failed.value  # held as a waiter holds its last error
    assert kept is not None
    assert _rdkafka_threads() == before
