"""The job's PySpark daemon: a worker the JVM hangs up on ends quietly (its code tells the
daemon's child to exit 0) instead of raising `EOFError`, whose trace PySpark's own daemon
prints after the job's one line."""

from __future__ import annotations

import socket
import struct

import pytest


def test_a_worker_whose_connection_is_closed_ends_without_an_error() -> None:
    from pyspark import daemon

    from rowbus.spark_apply import quiet_daemon

    assert daemon.worker is quiet_daemon._worker_until_hung_up
    ours, jvm = socket.socketpair()
    jvm.close()  # the JVM hangs up before the worker has read its first bytes
    with ours:
        with pytest.raises(EOFError):
            quiet_daemon._worker(ours, False)  # PySpark's own worker
        assert quiet_daemon._worker_until_hung_up(ours, False) == 1


def _hung_up_after_the_secret() -> socket.socket:
    """The worker's end of a connection on which the JVM sent its secret, then hung up."""
    ours, jvm = socket.socketpair()
    jvm.sendall(struct.pack("!i", len(SECRET)) + SECRET.encode())
    jvm.close()
    return ours


SECRET = "s3cret"


def test_a_worker_whose_connection_is_closed_while_it_authenticates_ends_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task cancelled with its failed stage: the JVM sent the worker its secret and hung up
    before the answer, whose flush breaks the pipe (PySpark's daemon printed the trace)."""
    from rowbus.spark_apply import quiet_daemon

    monkeypatch.setenv("PYTHON_WORKER_FACTORY_SECRET", SECRET)
    with _hung_up_after_the_secret() as ours, pytest.raises(BrokenPipeError):
        quiet_daemon._worker(ours, False)  # PySpark's own worker
    with _hung_up_after_the_secret() as ours:
        assert quiet_daemon._worker_until_hung_up(ours, False) == 1
