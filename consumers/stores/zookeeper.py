"""A checkpoint in a ZooKeeper znode: Ptubes' "storage point"."""

from __future__ import annotations

from typing import Any

from rowbus.clients.settings import ZooKeeperAuth
from rowbus.consumers.stores.base import CheckpointStore
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.exceptions import CheckpointError


class ZooKeeperStore(CheckpointStore):
    """The checkpoint as JSON in the znode `path` (created on the first save).

    Guarantee: at least once. The save is separate from the handler's work, so after a crash
    the transactions handled since the last save are delivered again; nothing at or before the
    saved checkpoint is. With a `client` given, the store uses it and leaves it open (sharded
    workers share one session); otherwise it opens its own session to `hosts`.
    """

    def __init__(
        self,
        path: str,
        *,
        hosts: str | None = None,
        client: Any = None,
        timeout: float = 10.0,
        auth: ZooKeeperAuth | None = None,
    ) -> None:
        super().__init__()
        if (hosts is None) == (client is None):
            raise ValueError("give either hosts or client")
        self.path = path
        self._hosts = hosts
        self._client = client
        self._own = client is None
        self._timeout = timeout
        self._auth = auth

    def open(self) -> None:
        if self._client is not None:
            return
        from rowbus.clients import zookeeper
        from rowbus.clients.errors import ZooKeeperClientError

        try:
            self._client = zookeeper.start_client(
                self._hosts or "", self._timeout, start_timeout=self._timeout, auth=self._auth
            )
        except ZooKeeperClientError as exc:
            raise CheckpointError(str(exc)) from exc

    def close(self) -> None:
        if self._own and self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def _zk(self) -> Any:
        if self._client is None:
            raise CheckpointError("the ZooKeeper store is not open")
        return self._client

    def _load(self) -> Checkpoint | None:
        from kazoo.exceptions import KazooException, NoNodeError

        try:
            data, _ = self._zk().get(self.path)
        except NoNodeError:
            return None
        except KazooException as exc:
            raise CheckpointError(_why(f"cannot read storage point {self.path}", exc)) from exc
        return Checkpoint.from_json(data)

    def _save(self, checkpoint: Checkpoint) -> None:
        from kazoo.exceptions import KazooException, NoNodeError

        data = checkpoint.to_json().encode("utf-8")
        zk = self._zk()
        try:
            try:
                zk.set(self.path, data)
            except NoNodeError:
                zk.create(self.path, data, makepath=True)
        except KazooException as exc:
            raise CheckpointError(_why(f"cannot write storage point {self.path}", exc)) from exc


def _why(what: str, exc: Exception) -> str:
    """One line: `what` failed, and why (a refusal for want of credentials names the setting)."""
    from kazoo.exceptions import NoAuthError

    from rowbus.clients.zookeeper import NO_AUTH

    return f"{what}: {NO_AUTH}" if isinstance(exc, NoAuthError) else f"{what}: {exc!r}"
