"""The one seam around kazoo: `start_client` builds and starts a client with a deadline;
`zk_errors` translates kazoo's failures into `ZooKeeperClientError`.

An election or a membership built on a client must watch the session itself (kazoo never
interrupts a leader): `start_client(listener=…)` registers the state listener before the
session starts, so no SUSPENDED/LOST transition is missed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rowbus.clients.errors import ZooKeeperClientError


@contextlib.contextmanager
def zk_errors(what: str) -> Iterator[None]:
    """Translate a kazoo failure raised inside the block into `ZooKeeperClientError`."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        retryable = isinstance(exc, KazooTimeoutError) or type(exc).__name__ in {
            "ConnectionLoss",
            "SessionExpiredError",
            "OperationTimeoutError",
        }
        raise ZooKeeperClientError(
            f"{what}: {type(exc).__name__} {exc}".rstrip(), type(exc).__name__, retryable=retryable
        ) from exc


def start_client(
    hosts: str,
    session_timeout: float = 10.0,
    *,
    start_timeout: float | None = None,
    listener: Callable[[str], Any] | None = None,
) -> Any:
    """A started `kazoo.client.KazooClient`; `ZooKeeperClientError` (retryable) when ZooKeeper
    does not answer within `start_timeout` (default: twice the session timeout, at least 5 s)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=session_timeout)
    if listener is not None:
        client.add_listener(listener)
    deadline = start_timeout if start_timeout is not None else max(5.0, session_timeout * 2)
    try:
        with zk_errors(f"cannot reach ZooKeeper at {hosts}"):
            client.start(timeout=deadline)
    except ZooKeeperClientError:
        with contextlib.suppress(Exception):
            client.close()
        raise
    return client


def stop_client(client: Any) -> None:
    """Stop and close a client (ephemeral nodes vanish at once)."""
    with contextlib.suppress(Exception):
        client.stop()
    with contextlib.suppress(Exception):
        client.close()
