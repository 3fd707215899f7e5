"""``zookeeper.auth`` on the test stack's real ZooKeeper: the reader election's nodes admit only
the configured digest credentials; a client without them (or with others) can neither read nor
change them, and a reader (or a subscriber's checkpoint store) without them stops with one line
naming the setting; the election still hands over between two readers that have them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl
from pydantic import SecretStr

from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.clients.zookeeper import start_client, stop_client, zk_errors
from rowbus.config import Settings
from rowbus.consumers.stores import ZooKeeperStore
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.exceptions import CheckpointError
from rowbus.merge.positions import Floor
from rowbus.producer.exceptions import ReaderError
from rowbus.producer.leader import ZooKeeperLeadership, leader_path

NEVER = threading.Event()


@pytest.fixture
def auth(tmp_path: Path) -> ZooKeeperAuth:
    secret = tmp_path / "zk-password"
    secret.write_text("s3cret-digest\n")
    return ZooKeeperAuth(user="rowbus", password_file=secret)


@pytest.fixture
def root(services: Settings, unique: Callable[[str], str], auth: ZooKeeperAuth) -> Iterator[str]:
    # A root of its own at the top: creating it under a shared parent that does not exist yet
    # would create that parent with the digest ACL too, closing it to every later test.
    path = f"/{unique('rowbus-acl')}"
    yield path
    client = start_client(services.zookeeper.hosts or "", 6.0, auth=auth)
    try:
        client.delete(path, recursive=True)
    finally:
        stop_client(client)


@pytest.fixture
def stranger(services: Settings) -> Iterator[KazooClient]:
    """A client of the same ZooKeeper without credentials."""
    client = KazooClient(hosts=services.zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    yield client
    stop_client(client)


def _leadership(
    services: Settings, path: str, name: str, auth: ZooKeeperAuth | None
) -> ZooKeeperLeadership:
    leadership = ZooKeeperLeadership(services.zookeeper.hosts or "", path, name, 6.0, auth)
    leadership.start()
    return leadership


def test_nodes_a_reader_creates_admit_only_its_credentials(
    services: Settings, root: str, auth: ZooKeeperAuth, stranger: KazooClient
) -> None:
    path = leader_path(root, "source1")
    first = _leadership(services, path, "reader-a", auth)
    friend = start_client(services.zookeeper.hosts or "", 6.0, auth=auth)
    try:
        assert first.acquire(NEVER)
        # Every node on the way, from rowbus's root down to the lock's own, has the digest ACL
        # alone: nothing of the election is open to another client.
        only = [make_digest_acl("rowbus", "s3cret-digest", all=True)]
        lock_nodes = friend.get_children(path)
        assert len(lock_nodes) == 1
        for node in (root, f"{root}/readers", f"{root}/readers/source1", path):
            assert friend.get_acls(node)[0] == only, node
        own = f"{path}/{lock_nodes[0]}"
        assert friend.get_acls(own)[0] == only
        for refused in (
            lambda: stranger.get_children(path),
            lambda: stranger.get(own),
            lambda: stranger.set(own, b"taken"),
            lambda: stranger.delete(own),
            lambda: stranger.create(f"{path}/intruder", b""),
            lambda: stranger.set_acls(path, OPEN_ACL_UNSAFE),
            lambda: stranger.get_acls(path),
        ):
            with pytest.raises(NoAuthError):
                refused()
        # The seam says it in one line, naming the setting.
        with pytest.raises(ZooKeeperClientError) as caught, zk_errors(f"reading {path}"):
            stranger.get_children(path)
        assert "\n" not in str(caught.value)
        assert "set zookeeper.auth" in str(caught.value)
        assert "s3cret" not in str(caught.value)
        # The lock is still the first reader's.
        assert first.is_leader()
        assert friend.get(own)[0] == b"reader-a"
    finally:
        stop_client(friend)
        first.close()


@pytest.mark.parametrize("credentials", ["none", "wrong"])
def test_a_reader_without_the_credentials_stops_with_one_line(
    services: Settings, root: str, auth: ZooKeeperAuth, credentials: str
) -> None:
    path = leader_path(root, "source1")
    owner = _leadership(services, path, "reader-a", auth)
    other = (
        None
        if credentials == "none"
        else ZooKeeperAuth(user="rowbus", password=SecretStr("not-the-password"))
    )
    intruder = _leadership(services, path, "reader-b", other)
    try:
        assert owner.acquire(NEVER)
        stop = threading.Event()
        # Refused at once, not retried: a wait with `stop` never set would hang otherwise.
        with pytest.raises(ReaderError) as caught:
            intruder.acquire(stop)
        message = str(caught.value)
        assert message.startswith(f"election {path}: ZooKeeper refused it (NoAuth)")
        assert "set zookeeper.auth" in message and "\n" not in message
        with pytest.raises(ReaderError, match="NoAuth"):
            intruder.is_leader()
        assert owner.is_leader() and not owner.lost
    finally:
        intruder.close()
        owner.close()


def test_the_election_hands_over_between_readers_with_the_credentials(
    services: Settings, root: str, auth: ZooKeeperAuth
) -> None:
    path = leader_path(root, "source1")
    first = _leadership(services, path, "reader-a", auth)
    second = _leadership(services, path, "reader-b", auth)
    given_up = threading.Event()
    waiting = threading.Thread()
    try:
        assert first.acquire(NEVER)
        assert not second.is_leader()
        won = threading.Event()
        waiting = threading.Thread(target=lambda: second.acquire(given_up) and won.set())
        waiting.start()
        first.close()
        assert won.wait(30), "the standby never took the lead after the leader closed"
        assert second.is_leader()
    finally:
        given_up.set()
        if waiting.is_alive():
            waiting.join(10)
        second.close()
        first.close()


def test_a_checkpoint_store_keeps_its_points_to_the_credentials(
    services: Settings, root: str, auth: ZooKeeperAuth
) -> None:
    hosts = services.zookeeper.hosts or ""
    path = f"{root}/subscribers/g/points/shard-0"
    point = Checkpoint(offsets={("t", 0): 7}, floors={"s": Floor(ts=9)}, ts=9)
    owner = ZooKeeperStore(path, hosts=hosts, auth=auth)
    owner.open()
    try:
        owner.save(point)
        assert owner.load() == point
    finally:
        owner.close()
    stranger = ZooKeeperStore(path, hosts=hosts)
    stranger.open()
    try:
        with pytest.raises(CheckpointError) as caught:
            stranger.load()
        assert str(caught.value).startswith(f"cannot read storage point {path}: ZooKeeper refused")
        assert "set zookeeper.auth" in str(caught.value) and "\n" not in str(caught.value)
        with pytest.raises(CheckpointError, match=re.escape("set zookeeper.auth")):
            stranger.save(point)
    finally:
        stranger.close()


def test_the_digest_password_reaches_no_log_at_any_level(
    services: Settings, root: str, auth: ZooKeeperAuth, caplog: pytest.LogCaptureFixture
) -> None:
    # kazoo logs each request it sends, its digest Auth request ("user:password") at DEBUG and
    # pings at its level 5: with everything captured, from level 1, the password is in no
    # record; the Auth request itself is, masked.
    caplog.set_level(1)
    client = start_client(services.zookeeper.hosts or "", 6.0, auth=auth)
    try:
        client.ensure_path(f"{root}/logged")
    finally:
        stop_client(client)
    texts = [r.getMessage() for r in caplog.records]
    sent = [t for t in texts if "Auth(" in t]
    assert sent, "kazoo's Auth request was not logged: the capture saw nothing to check"
    assert all("auth='rowbus:***'" in t for t in sent), sent
    assert [t for t in texts if "s3cret-digest" in t] == []
