"""Leadership of a source through ZooKeeper (kazoo), so one of several readers publishes; an
implementation of `rowbus.clients.election.Election`.

Lifecycle: construct (no I/O), `start()`, then `acquire(stop)` blocks until this reader leads
(or `stop` is set); while leading, `lost` turns true the moment the session is SUSPENDED or LOST
and the reader must stop publishing at once (kazoo never interrupts a leader by itself; a
frozen leader learns it lost only when it wakes). `release()` gives leadership up; `close()`
ends the session. A zombie that missed all of this is fenced by Kafka's transactional.id.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

from rowbus.clients import zookeeper
from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.producer.exceptions import ReaderError, SourceUnavailableError

log = logging.getLogger(__name__)

_ALREADY_SET = threading.Event()
_ALREADY_SET.set()


def leader_path(root: str, source: str) -> str:
    """The ZooKeeper path of `source`'s reader election under the deployment's `root`."""
    return f"{root.rstrip('/')}/readers/{source}/leader"


def contenders(client: Any, root: str, source: str) -> list[str]:
    """The readers of `source` in election order (the leader first), read with a started
    kazoo client; [] when none ever ran."""
    path = leader_path(root, source)
    return list(Lock(client, path).contenders()) if client.exists(path) else []


class ZooKeeperLeadership:
    """A source's reader election (an `Election`): contenders queue on kazoo's lock recipe at
    `path`, the first leads."""

    def __init__(
        self,
        hosts: str,
        path: str,
        identifier: str,
        session_timeout_s: float,
        auth: ZooKeeperAuth | None = None,
    ) -> None:
        self._hosts = hosts
        self._auth = auth
        self._path = path
        self._identifier = identifier
        self._timeout = session_timeout_s
        self._client: KazooClient | None = None
        self._lock: Lock | None = None
        self._lost = threading.Event()
        self._leading = False

    def start(self) -> None:
        try:
            client = zookeeper.start_client(
                self._hosts,
                self._timeout,
                start_timeout=max(15.0, self._timeout * 2),
                listener=self._on_state,
                auth=self._auth,
            )
        except ZooKeeperClientError as exc:
            raise SourceUnavailableError(f"ZooKeeper {self._hosts} unreachable: {exc}") from exc
        self._client = client

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST) and self._leading:
            log.warning("ZooKeeper session %s while leading %s: stop publishing", state, self._path)
            self._lost.set()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this reader leads (True) or `stop` is set (False; with `stop` already
        set, one attempt that does not wait)."""
        assert self._client is not None, "start() first"
        self._lost.clear()
        if self._lock is None:
            self._lock = Lock(self._client, self._path, self._identifier)
            log.info("waiting for leadership of %s as %s", self._path, self._identifier)
        once = stop.is_set()
        while once or not stop.is_set():
            try:
                if self._lock.acquire(blocking=not once, timeout=None if once else 0.5):
                    self._leading = True
                    if self._client.state != KazooState.CONNECTED:
                        self._lost.set()
                    log.info("leading %s as %s", self._path, self._identifier)
                    return True
            except (KazooTimeoutError, LockTimeout):
                pass
            except NoAuthError as exc:
                # Retrying cannot help: the election's nodes belong to other credentials.
                self._lock = None
                raise ReaderError(f"election {self._path}: {zookeeper.NO_AUTH}") from exc
            except KazooException as exc:
                log.warning("election on %s: %s; retrying", self._path, exc)
                stop.wait(0.5)
            if once:
                return False
        return False

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def is_leader(self) -> bool:
        """Whether this reader leads now, taking the lock if nobody holds it."""
        if self._leading:
            return not self.lost
        return self.acquire(_ALREADY_SET)

    def release(self) -> None:
        self._leading = False
        if self._lock is not None:
            try:
                self._lock.release()
            except KazooException as exc:
                log.debug("releasing %s: %s", self._path, exc)
            self._lock = None

    def close(self) -> None:
        """End the session (its ephemeral lock node goes with it). The lock is released first
        only while connected: kazoo retries a release without end while ZooKeeper is away."""
        if self._client is not None and self._client.state == KazooState.CONNECTED:
            self.release()
        self._leading = False
        self._lock = None
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except KazooException as exc:
                log.debug("closing ZooKeeper client: %s", exc)
            self._client = None
