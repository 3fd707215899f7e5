"""The ZooKeeper side of sharded consumption (the one seam around kazoo here).

Layout under ``{root}/subscribers/{group}``::

    shards            data: the shard count (every member must agree)
    members/{id}      ephemeral: one per running process
    owners/{shard}    ephemeral, data: the owning member's id — a shard is handled by at most
                      one process: a gaining process waits until the losing one released it
                      (after checkpointing), or until the loser's session expired
    points/{shard}    the shard's storage point (a `Checkpoint`, `ZooKeeperStore`)

Kazoo errors become `ShardingError` here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from rowbus.clients import zookeeper
from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.consumers.exceptions import ShardingError
from rowbus.consumers.stores.zookeeper import ZooKeeperStore

log = logging.getLogger(__name__)


@contextmanager
def _zk_errors(what: str) -> Iterator[None]:
    try:
        with zookeeper.zk_errors(what):
            yield
    except ZooKeeperClientError as exc:
        raise ShardingError(str(exc)) from exc


class Membership:
    """One process's session in a group. `open()` connects, checks the shard count and
    registers the member; `changed` is set whenever the member list changes; `close()` leaves
    (the ephemeral nodes go with the session)."""

    def __init__(
        self,
        hosts: str,
        group: str,
        member: str,
        shards: int,
        *,
        root: str = "/rowbus",
        session_timeout_s: float = 6.0,
        auth: ZooKeeperAuth | None = None,
    ) -> None:
        self.base = f"{root.rstrip('/')}/subscribers/{group}"
        self.member = member
        self.shards = shards
        self._hosts = hosts
        self._timeout = session_timeout_s
        self._auth = auth
        self._zk: Any = None
        self.changed = threading.Event()

    def open(self) -> None:
        from kazoo.exceptions import NodeExistsError

        try:
            self._zk = zookeeper.start_client(self._hosts, self._timeout, auth=self._auth)
        except ZooKeeperClientError as exc:
            raise ShardingError(str(exc)) from exc
        with _zk_errors(f"cannot join {self.base}"):
            for sub in ("members", "owners", "points"):
                self._zk.ensure_path(f"{self.base}/{sub}")
            with suppress(NodeExistsError):
                self._zk.create(f"{self.base}/shards", str(self.shards).encode())
            stored = int(self._zk.get(f"{self.base}/shards")[0])
            if stored != self.shards:
                raise ShardingError(
                    f"{self.base} has {stored} shards; this process was started with "
                    f"{self.shards} (every member of a group must use the same count)"
                )
            self._claim(f"{self.base}/members/{self.member}")
            self._zk.ChildrenWatch(f"{self.base}/members", self._on_members)
        log.info("%s joined %s", self.member, self.base)

    def _on_members(self, children: list[str]) -> None:
        log.info("members of %s: %s", self.base, sorted(children))
        self.changed.set()

    def _claim(self, path: str) -> bool:
        """Create the ephemeral `path` holding our id; True if it is ours (a node left by a
        previous session of the same member is replaced)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        data = self.member.encode()
        try:
            self._zk.create(path, data, ephemeral=True)
            return True
        except NodeExistsError:
            pass
        try:
            value, stat = self._zk.get(path)
        except NoNodeError:
            return self._claim(path)
        if value != data:
            return False
        if stat.ephemeralOwner == self._zk.client_id[0]:
            return True
        log.info("replacing %s left by a previous session of %s", path, self.member)
        self._zk.delete(path, version=stat.version)
        return self._claim(path)

    def members(self) -> list[str]:
        with _zk_errors(f"cannot list the members of {self.base}"):
            return sorted(self._zk.get_children(f"{self.base}/members"))

    def acquire(self, shard: int) -> bool:
        """Take ownership of `shard`; False while another member still holds it."""
        with _zk_errors(f"cannot take shard {shard} of {self.base}"):
            return self._claim(f"{self.base}/owners/{shard}")

    def release(self, shard: int) -> None:
        """Give `shard` up (after its storage point is saved)."""
        from kazoo.exceptions import NoNodeError

        path = f"{self.base}/owners/{shard}"
        with _zk_errors(f"cannot release shard {shard} of {self.base}"):
            try:
                value, stat = self._zk.get(path)
                if value == self.member.encode():
                    self._zk.delete(path, version=stat.version)
            except NoNodeError:
                pass

    def store(self, shard: int) -> ZooKeeperStore:
        """The storage point of `shard`, on this session."""
        return ZooKeeperStore(f"{self.base}/points/{shard}", client=self._zk)

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None
