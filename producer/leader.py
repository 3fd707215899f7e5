"""Leadership of a source through ZooKeeper (kazoo), so one of several readers publishes.

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
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

from rowbus.clients import zookeeper
from rowbus.clients.errors import ZooKeeperClientError
from rowbus.producer.exceptions import SourceUnavailableError

log = logging.getLogger(__name__)


class Leadership:
    """Interface: a reader leads while `acquire` returned True and `lost` is false."""

    def start(self) -> None:
        """Connect (no-op here)."""

    def acquire(self, stop: threading.Event) -> bool:
        return not stop.is_set()

    @property
    def lost(self) -> bool:
        return False

    def release(self) -> None:
        """Give leadership up (no-op here)."""

    def close(self) -> None:
        """End the session (no-op here)."""


def leader_path(root: str, source: str) -> str:
    """The ZooKeeper path of `source`'s reader election under the deployment's `root`."""
    return f"{root.rstrip('/')}/readers/{source}/leader"


def contenders(client: Any, root: str, source: str) -> list[str]:
    """The readers of `source` in election order (the leader first), read with a started
    kazoo client; [] when none ever ran."""
    path = leader_path(root, source)
    return list(Lock(client, path).contenders()) if client.exists(path) else []


class NoElection(Leadership):
    """A single reader without ZooKeeper: always leads."""


class ZooKeeperLeadership(Leadership):
    def __init__(self, hosts: str, path: str, identifier: str, session_timeout_s: float) -> None:
        self._hosts = hosts
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
            )
        except ZooKeeperClientError as exc:
            raise SourceUnavailableError(f"ZooKeeper {self._hosts} unreachable: {exc}") from exc
        self._client = client

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST) and self._leading:
            log.warning("ZooKeeper session %s while leading %s: stop publishing", state, self._path)
            self._lost.set()

    def acquire(self, stop: threading.Event) -> bool:
        assert self._client is not None, "start() first"
        self._lost.clear()
        self._lock = Lock(self._client, self._path, self._identifier)
        log.info("waiting for leadership of %s as %s", self._path, self._identifier)
        while not stop.is_set():
            try:
                if self._lock.acquire(blocking=True, timeout=0.5):
                    self._leading = True
                    if self._client.state != KazooState.CONNECTED:
                        self._lost.set()
                    log.info("leading %s as %s", self._path, self._identifier)
                    return True
            except (KazooTimeoutError, LockTimeout):
                continue
            except KazooException as exc:
                log.warning("election on %s: %s; retrying", self._path, exc)
                stop.wait(0.5)
        return False

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def release(self) -> None:
        self._leading = False
        if self._lock is not None:
            try:
                self._lock.release()
            except KazooException as exc:
                log.debug("releasing %s: %s", self._path, exc)
            self._lock = None

    def close(self) -> None:
        self.release()
        if self._client is not None:
            try:
                self._client.stop()
                self._client.close()
            except KazooException as exc:
                log.debug("closing ZooKeeper client: %s", exc)
            self._client = None
