"""What several benchmarks need: a connection to a server given as HOST:PORT, the binlog end,
and the process's peak RSS."""

from __future__ import annotations

import resource
from typing import Any

from rowbus.clients import mysql


def connect(hostport: str, user: str, password: str, db: str | None = None) -> Any:
    host, port = hostport.split(":")
    return mysql.connect(
        host=host, port=int(port), user=user, password=password, database=db, autocommit=True
    )


def binlog_end(conn: Any) -> tuple[str, int]:
    """The server's current binlog file and position."""
    with conn.cursor() as cur:
        found = mysql.binlog_position(cur)
    if found is None:
        raise RuntimeError("binary logging is off on the benchmark's server")
    return found


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
