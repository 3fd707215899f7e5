"""Which apply job executes shard DDL: a coordinator elected through ZooKeeper.

The coordinator holds the ephemeral node ``<root>/shard_ddl/<name>/coordinator`` whose data is
its identifier. `is_leader()` never blocks long: it takes the node if it is free and otherwise
compares its data. A node holding our own identifier but created by another session is a leftover
of our previous incarnation (killed before ZooKeeper expired its session): it is replaced at once,
so identifiers must be unique per job. Lifecycle: no I/O in the constructor; `start()` connects;
`close()` gives the node up.

Both implement `rowbus.clients.election.Election`; `SoleCoordinator` (`Unopposed`) is the
election of a job that shares its targets with nobody.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rowbus.clients import zookeeper
from rowbus.clients.election import Election, Unopposed
from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.shard_ddl.exceptions import ElectionError

log = logging.getLogger(__name__)


# The election of a job that shares its targets with nobody.
SoleCoordinator = Unopposed


class ZkElection:
    """The shard-DDL coordinator election (an `Election`): one ephemeral node."""

    def __init__(
        self,
        hosts: str,
        identifier: str,
        *,
        root: str = "/rowbus",
        name: str = "default",
        session_timeout_s: float = 6.0,
        auth: ZooKeeperAuth | None = None,
    ) -> None:
        self._auth = auth
        self.path = f"{root.rstrip('/')}/shard_ddl/{name}/coordinator"
        self.identifier = identifier
        self._hosts = hosts
        self._timeout = session_timeout_s
        self._zk: Any = None
        self._lost = threading.Event()

    def start(self) -> ZkElection:

        try:
            self._zk = zookeeper.start_client(
                self._hosts, self._timeout, listener=self._on_state, auth=self._auth
            )
        except ZooKeeperClientError as exc:
            raise ElectionError(str(exc)) from exc
        return self

    def _on_state(self, state: str) -> None:
        if state in ("SUSPENDED", "LOST"):
            self._lost.set()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this job is the coordinator (True) or `stop` is set (False)."""
        while True:
            if self.is_leader():
                self._lost.clear()
                return True
            if stop.wait(0.2):
                return False

    def release(self) -> None:
        """Give the node up if it is ours."""
        from kazoo.exceptions import KazooException, NoNodeError

        if self._zk is None:
            return
        try:
            value, stat = self._zk.get(self.path)
            if value == self.identifier.encode() and stat.ephemeralOwner == self._zk.client_id[0]:
                self._zk.delete(self.path, version=stat.version)
        except (NoNodeError, KazooException) as exc:
            log.debug("releasing %s: %s", self.path, exc)

    def holder(self) -> str | None:
        """The identifier of the current coordinator (None: none now), for operators and tests."""
        from kazoo.exceptions import KazooException, NoNodeError

        try:
            value, _ = self._zk.get(self.path)
        except NoNodeError:
            return None
        except KazooException as exc:
            raise ElectionError(f"coordinator election at {self.path}: {exc}") from exc
        return bytes(value).decode()

    def is_leader(self) -> bool:
        from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

        data = self.identifier.encode()
        try:
            try:
                self._zk.create(self.path, data, ephemeral=True, makepath=True)
                log.info("%s is the shard-DDL coordinator (%s)", self.identifier, self.path)
                return True
            except NodeExistsError:
                pass
            try:
                value, stat = self._zk.get(self.path)
            except NoNodeError:
                return False  # freed meanwhile: taken on the next call
            if value != data:
                return False
            if stat.ephemeralOwner == self._zk.client_id[0]:
                return True
            log.info("replacing %s left by a previous session of %s", self.path, self.identifier)
            self._zk.delete(self.path, version=stat.version)
            return False
        except KazooException as exc:
            raise ElectionError(f"coordinator election at {self.path}: {exc}") from exc

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None


__all__ = ["Election", "SoleCoordinator", "ZkElection"]
