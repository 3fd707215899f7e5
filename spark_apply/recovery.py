"""Riding out a sink that goes away: the query ends, the job waits until the sink answers
again, and a new query resumes from Spark's checkpoint and the sink's own head.

Nothing is lost or applied twice by this: a batch the sink did not commit runs again with the
same id and offsets, and the sink's checkpoint row decides whether it already holds it
(exactly the recovery of a restarted job, README "Exactly once"). What is retried is what the
sink may get over by itself: it cannot be reached (restart, failover, network), or it rolled a
transaction back for a deadlock or a lock wait. An event the sink refuses is not retried.
"""

from __future__ import annotations

import re
import threading
import time

from rowbus.clients import mysql
from rowbus.spark_apply.exceptions import SinkUnavailableError, TransactionConflictError
from rowbus.spark_apply.settings import SinkConnection

_RETRYABLE = (SinkUnavailableError, TransactionConflictError)
_NAMED = re.compile(
    rf"^(?:[\w.]+\.)?({'|'.join(e.__name__ for e in _RETRYABLE)}): (.*)$", re.MULTILINE
)
_DRIVER = re.compile(r"^(?:pymysql\.err\.)?(InterfaceError|OperationalError): (\((\d+).*)$", re.M)
"""A sink connection's own failure that reached Spark untranslated (a connection the server
dropped, used again: pymysql's ``InterfaceError (0, '')``)."""


def retryable(exc: BaseException) -> str | None:
    """The failure's one line when the job may go on once the sink answers; None otherwise.
    Spark hands a batch's exception back inside its own, as text: the last line naming one
    of ours decides (a traceback's source lines do not start with the name)."""
    if isinstance(exc, _RETRYABLE):
        return f"{type(exc).__name__}: {exc}"
    if mysql.classify(exc) is mysql.Kind.UNAVAILABLE and mysql.error_code(exc) is not None:
        return f"sink unavailable: {type(exc).__name__}: {exc}"
    text = str(exc)
    named = list(_NAMED.finditer(text))
    if named:
        return f"{named[-1].group(1)}: {named[-1].group(2).strip()}"[:500]
    dropped = [
        m
        for m in _DRIVER.finditer(text)
        if m.group(1) == "InterfaceError"
        or (2000 <= int(m.group(3)) < 3000 and int(m.group(3)) not in mysql.TLS)
    ]
    if dropped:
        return f"sink unavailable: {dropped[-1].group(1)}: {dropped[-1].group(2).strip()}"[:500]
    return None


def wait_for_sink(
    conn: SinkConnection, deadline: float, stop: threading.Event | None = None
) -> bool:
    """Whether the sink accepts a connection before `deadline` (time.monotonic()); tried at
    growing intervals (0.5 s to 5 s)."""
    from rowbus.spark_apply.sink_conn import connect_sink

    pause = 0.5
    while True:
        try:
            connect_sink(conn).close()
            return True
        except SinkUnavailableError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
        if (stop or threading.Event()).wait(min(pause, left)):
            return False
        pause = min(5.0, pause * 2)
