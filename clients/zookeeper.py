"""The one seam around kazoo: `start_client` builds and starts a client with a deadline;
`zk_errors` translates kazoo's failures into `ZooKeeperClientError`.

With credentials (`ZooKeeperAuth`, the ``zookeeper.auth`` setting) a client authenticates with
ZooKeeper's ``digest`` scheme and every node it creates gets an ACL admitting only that user
(kazoo's ``default_acl``, which its create, ensure_path and lock recipes use). A node refused for
want of them (``NoAuth``) is reported in one line naming the setting, never retried.

kazoo logs every request it sends (at DEBUG; pings at its level 5), the digest ``Auth`` request
with ``user:password`` in it among them: every client is built with kazoo's own logger carrying
`RedactSecrets`, which masks the credential of an ``Auth`` request and any password handed to
`start_client`, at every level, before a handler sees the record.

An election or a membership built on a client must watch the session itself (kazoo never
interrupts a leader): `start_client(listener=…)` registers the state listener before the
session starts, so no SUSPENDED/LOST transition is missed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
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


MASK = "***"


class RedactSecrets(logging.Filter):
    """Masks ZooKeeper credentials in the records of the logger it is on: the credential part
    (after ``user:``) of kazoo's ``Auth`` requests, and every password registered with
    `hide`, wherever it appears in the message. Records below the logger's level never reach
    it, so it costs nothing while kazoo's debug output is off."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def hide(self, secret: str) -> None:
        if secret:
            with self._lock:
                self._secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(_is_auth(a) for a in record.args):
            record.args = tuple(_masked_auth(a) if _is_auth(a) else a for a in record.args)
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
        if secrets:
            message = record.getMessage()
            if any(s in message for s in secrets):
                for secret in secrets:
                    message = message.replace(secret, MASK)
                record.msg, record.args = message, None
        return True


def _is_auth(value: object) -> bool:
    return type(value).__name__ == "Auth" and hasattr(value, "_replace") and hasattr(value, "auth")


def _masked_auth(request: Any) -> Any:
    user, sep, _ = str(request.auth).partition(":")
    return request._replace(auth=f"{user}{sep}{MASK}" if sep else MASK)


REDACT = RedactSecrets()


def kazoo_logger() -> logging.Logger:
    """kazoo's client logger (its client and connection log through it) with `REDACT` on."""
    logger = logging.getLogger("kazoo.client")
    if REDACT not in logger.filters:
        logger.addFilter(REDACT)
    return logger


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

    client = KazooClient(
        hosts=hosts, timeout=session_timeout, logger=kazoo_logger(), **_credentials(auth)
    )
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
    REDACT.hide(password)
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
