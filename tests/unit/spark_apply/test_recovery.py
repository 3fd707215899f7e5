"""Which failures of a batch the job rides out by waiting for the sink (`recovery.retryable`):
Spark hands them back as text inside its own exception."""

from __future__ import annotations

import pymysql

from rowbus.spark_apply.exceptions import BadEventError, SinkUnavailableError
from rowbus.spark_apply.recovery import retryable


def _spark(line: str) -> Exception:
    return RuntimeError(
        "An exception was raised by the Python Proxy.\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    raise SinkUnavailableError(what)\n' + line
    )


def test_the_sink_going_away_is_retried_however_it_reaches_the_job() -> None:
    assert retryable(SinkUnavailableError("reading the head: sink unavailable"))
    assert retryable(_spark("rowbus.spark_apply.exceptions.SinkUnavailableError: gone"))
    # A connection the server dropped, used again before anything translated it.
    assert retryable(_spark("pymysql.err.InterfaceError: (0, '')"))
    assert retryable(_spark("pymysql.err.OperationalError: (2013, 'Lost connection')"))
    assert retryable(pymysql.err.OperationalError(2006, "MySQL server has gone away"))


def test_what_the_sink_refuses_is_not_retried() -> None:
    assert retryable(BadEventError("Data truncated", "t[0]@5")) is None
    assert retryable(_spark("pymysql.err.OperationalError: (1054, 'Unknown column x')")) is None
    assert retryable(_spark("rowbus.spark_apply.exceptions.BadEventError: t[0]@5: bad")) is None
    assert retryable(RuntimeError("something else")) is None


def test_tls_that_cannot_be_agreed_is_not_retried() -> None:
    # A certificate that does not verify, or a server without TLS under tls.mode required,
    # stays so however long the job waits: the job stops with the one line instead.
    refused = "TLS to sink:3306: certificate verify failed (self-signed certificate)"
    assert retryable(pymysql.err.OperationalError(2026, refused)) is None
    assert retryable(_spark(f"pymysql.err.OperationalError: (2026, '{refused}')")) is None
