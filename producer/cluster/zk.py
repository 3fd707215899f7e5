"""Reading and writing the cluster's znodes (`rowbus.producer.cluster.state`) with a started
kazoo client; kazoo's errors leave here as `ZooKeeperClientError` (`zk_errors`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from rowbus.clients.zookeeper import zk_errors
from rowbus.producer.cluster.scheduler import Plan
from rowbus.producer.cluster.state import ClusterView, NodeStatus, Paths, ReplicationSet

Watch = Callable[[Any], object] | None


def ensure_paths(client: Any, paths: Paths) -> None:
    with zk_errors("creating the cluster's znodes"):
        for path in (paths.nodes, paths.sets, paths.moves, paths.drains, paths.coordinator):
            client.ensure_path(path)


def _children(client: Any, path: str, watch: Watch) -> list[str]:
    try:
        return sorted(client.get_children(path, watch=watch))
    except NoNodeError:
        return []


def _data(client: Any, path: str, watch: Watch) -> bytes | None:
    try:
        data, _stat = client.get(path, watch=watch)
    except NoNodeError:
        return None
    return bytes(data or b"")


def read_sets(client: Any, paths: Paths, watch: Watch = None) -> dict[str, ReplicationSet]:
    sets = {}
    with zk_errors("reading replication sets"):
        for source in _children(client, paths.sets, watch):
            data = _data(client, paths.set(source), watch)
            if data is not None:
                sets[source] = ReplicationSet.decode(source, data)
    return sets


def read_view(client: Any, paths: Paths, watch: Watch = None) -> ClusterView:
    nodes, moves = {}, {}
    with zk_errors("reading the cluster"):
        for node in _children(client, paths.nodes, watch):
            data = _data(client, paths.node(node), watch)
            if data is not None:
                nodes[node] = NodeStatus.decode(node, data)
        for source in _children(client, paths.moves, watch):
            data = _data(client, paths.move(source), None)
            if data:
                moves[source] = data.decode()
        drains = frozenset(_children(client, paths.drains, watch))
    return ClusterView(nodes, read_sets(client, paths, watch), moves, drains)


def coordinator(client: Any, paths: Paths) -> str | None:
    """The elected coordinator's node name: the first contender of kazoo's election recipe."""
    with zk_errors("reading the coordinator election"):
        if not client.exists(paths.coordinator):
            return None
        ordered = list(client.Election(paths.coordinator).contenders())
    return str(ordered[0]) if ordered else None


def apply_plan(client: Any, paths: Paths, plan: Plan) -> None:
    """Write the coordinator's decisions (it is the only writer of sets)."""
    with zk_errors("writing replication sets"):
        for source, rset in plan.write.items():
            try:
                client.set(paths.set(source), rset.encode())
            except NoNodeError:
                client.create(paths.set(source), rset.encode(), makepath=True)
        for source in plan.delete:
            with contextlib.suppress(NoNodeError):
                client.delete(paths.set(source))
        for source in plan.moves_done:
            with contextlib.suppress(NoNodeError):
                client.delete(paths.move(source))


def put(client: Any, path: str, data: bytes) -> None:
    """Create or overwrite a persistent znode (an operator's request)."""
    with zk_errors(f"writing {path}"):
        try:
            client.create(path, data, makepath=True)
        except NodeExistsError:
            client.set(path, data)


def remove(client: Any, path: str) -> None:
    with zk_errors(f"deleting {path}"), contextlib.suppress(NoNodeError):
        client.delete(path)
