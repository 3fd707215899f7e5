"""A reader cluster node started while its network to ZooKeeper is cut (the test stack's real
ZooKeeper behind the loopback proxy of `tests/faults`) waits for ZooKeeper to answer and then
registers, instead of exiting: found by the nemesis (seed 5), where a node restarted during
lag-zookeeper exited with status 2, "ZooKeeper unreachable", 5 s after its start."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from rowbus.clients.zookeeper import stop_client
from rowbus.config import Settings
from rowbus.producer.cluster.node import ClusterNode
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.waiting import wait_for
from tests.faults.proxy import Proxy


def test_a_node_started_while_zookeeper_is_cut_registers_once_it_answers(
    services: Settings, unique: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    host, port = (services.zookeeper.hosts or "").split(",")[0].rsplit(":", 1)
    proxy = Proxy((host, int(port)))
    proxy.cut()
    root = f"/{unique('rowbus-node-start')}"
    node = ClusterNode(
        {},
        ReaderSettings(cluster={"node_id": "n1"}),  # type: ignore[arg-type]
        Services(kafka={}, zookeeper_hosts=f"127.0.0.1:{proxy.port}", zookeeper_root=root),
    )
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            node.run(stop)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    watcher = KazooClient(hosts=services.zookeeper.hosts, timeout=10)
    watcher.start(timeout=15)
    try:
        thread.start()
        # One whole attempt refused (the client's own start deadline, 5 s) before the network
        # comes back: the old code ended the node there.
        wait_for(
            lambda: failed or "connecting again" in caplog.text,
            timeout=60,
            what="the node's first attempt to reach ZooKeeper to fail",
        )
        assert failed == [], failed
        proxy.restore()
        wait_for(
            lambda: failed or watcher.exists(node.paths.node("n1")) is not None,
            timeout=60,
            what="the node to register once ZooKeeper answers",
        )
        assert failed == [], failed
    finally:
        stop.set()
        thread.join(30)
        proxy.close()
        watcher.delete(root, recursive=True)
        stop_client(watcher)
    assert not thread.is_alive()
