"""The one seam around kazoo: `start_client` builds and starts a client with a deadline;
`zk_errors` translates kazoo's failures into `ZooKeeperClientError`.

With credentials (`ZooKeeperAuth`, the ``zookeeper.auth`` setting) a client authenticates with
ZooKeeper's ``digest`` scheme and every node it creates gets an ACL admitting only that user
(kazoo's ``default_acl``, which its create, ensure_path and lock recipes use). A node refused for
want of them (``NoAuth``) is reported in one line naming the setting, never retried.

An election or a membership built on a client must watch the session itself (kazoo never
interrupts a leader): `start_client(listener=…)` registers the state listener before the
session starts, so no SUSPENDED/LOST transition is missed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import ZooKeeperAuth

NO_AUTH = (
    "ZooKeeper refused it (NoAuth): the node's ACL admits other credentials; set "
    "zookeeper.auth (user, and password_file or password_env) to the digest credentials "
    "rowbus's nodes were created with"
)
"""What a refusal for want of credentials says (after what was refused)."""


@contextlib.contextmanager
def zk_errors(what: str) -> Iterator[None]:
    """Translate a kazoo failure raised inside the block into `ZooKeeperClientError`."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        if type(exc).__name__ in {"NoAuthError", "AuthFailedError"}:
            raise ZooKeeperClientError(f"{what}: {NO_AUTH}", type(exc).__name__) from exc
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
    auth: ZooKeeperAuth | None = None,
) -> Any:
    """A started `kazoo.client.KazooClient`; `ZooKeeperClientError` (retryable) when ZooKeeper
    does not answer within `start_timeout` (default: twice the session timeout, at least 5 s).
    With `auth` the session is authenticated and the nodes it creates admit only that user."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=session_timeout, **_credentials(auth))
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


def _credentials(auth: ZooKeeperAuth | None) -> dict[str, Any]:
    """kazoo's `auth_data` and `default_acl` for `auth` (nothing without it)."""
    if auth is None:
        return {}
    from kazoo.security import make_digest_acl

    password = auth.secret()
    return {
        "auth_data": [("digest", f"{auth.user}:{password}")],
        "default_acl": [make_digest_acl(auth.user, password, all=True)],
    }


def stop_client(client: Any) -> None:
    """Stop and close a client (ephemeral nodes vanish at once)."""
    with contextlib.suppress(Exception):
        client.stop()
    with contextlib.suppress(Exception):
        client.close()
