"""The job's PySpark daemon: a worker the JVM hangs up on ends quietly (its code tells the
daemon's child to exit 0) instead of raising `EOFError`, whose trace PySpark's own daemon
prints after the job's one line."""

from __future__ import annotations

import socket

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
