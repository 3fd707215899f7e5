"""Operator actions on a reader cluster (`rowbus reader nodes|move|drain`): list the nodes and
sets, ask the coordinator to move a source or drain a node, and wait until it is done."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rowbus.clients import zookeeper
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.producer.cluster import zk
from rowbus.producer.cluster.state import ClusterView, Paths, ReplicationSet, SetState
from rowbus.producer.exceptions import ReaderError


class ClusterTimeoutError(ReaderError):
    """An operator request was not done before its deadline."""


@contextmanager
def session(
    hosts: str, root: str, timeout_s: float = 10.0, auth: ZooKeeperAuth | None = None
) -> Iterator[tuple[Any, Paths]]:
    client = zookeeper.start_client(hosts, timeout_s, auth=auth)
    try:
        yield client, Paths(root)
    finally:
        zookeeper.stop_client(client)


def view(client: Any, paths: Paths) -> ClusterView:
    return zk.read_view(client, paths)


def rows(v: ClusterView) -> list[dict[str, object]]:
    """One row per replication set: state, owner, target, owner's phase and watermark."""
    out: list[dict[str, object]] = []
    for source, s in sorted(v.sets.items()):
        task = v.nodes[s.owner].tasks.get(source) if s.owner in v.nodes else None
        out.append(
            {
                "source": source,
                "state": s.state.value,
                "owner": s.owner,
                "target": s.target,
                "phase": task.phase.value if task else None,
                "watermark_ts": task.ts if task else None,
            }
        )
    return out


def summary(v: ClusterView, coordinator: str | None) -> dict[str, object]:
    """The cluster as `rowbus status` shows it: every node named anywhere (live ones registered,
    others only still named by a set), the coordinator, each set's owner and state, and the
    pending moves — an operator's request not yet done, or a set between Prepare and Replicating.
    """
    named = set(v.nodes) | set(v.drains)
    for each in v.sets.values():
        named |= {n for n in (each.owner, each.target) if n is not None}
    nodes = [
        {
            "node": n,
            "live": n in v.nodes,
            "coordinator": n == coordinator,
            "draining": n in v.drains,
            "tasks": sorted(v.nodes[n].tasks) if n in v.nodes else [],
        }
        for n in sorted(named)
    ]
    moves: list[dict[str, object]] = []
    for source in sorted(set(v.moves) | set(v.sets)):
        s = v.sets.get(source)
        in_flight = s is not None and s.state in (SetState.PREPARE, SetState.COMMIT)
        if source not in v.moves and not in_flight:
            continue
        moves.append(
            {
                "source": source,
                "from": s.owner if s else None,
                "to": v.moves.get(source, s.target if s else None),
                "state": s.state.value if s else None,
                "requested": source in v.moves,
            }
        )
    return {"coordinator": coordinator, "nodes": nodes, "sets": rows(v), "moves": moves}


def _wait(
    client: Any,
    paths: Paths,
    done: Callable[[ClusterView], bool],
    timeout_s: float,
    what: str,
) -> ClusterView:
    changed = threading.Event()
    deadline = time.monotonic() + timeout_s
    while True:
        changed.clear()
        v = zk.read_view(client, paths, lambda _e: changed.set())
        if done(v):
            return v
        left = deadline - time.monotonic()
        if left <= 0:
            raise ClusterTimeoutError(f"{what}: not done within {timeout_s:.0f} s")
        changed.wait(min(left, 0.5))


def _published_past(v: ClusterView, s: ReplicationSet) -> bool:
    """The set replicates on a live node whose watermark reached the previous owner's last."""
    if s.state is not SetState.REPLICATING or s.owner not in v.nodes:
        return False
    task = v.nodes[s.owner].tasks.get(s.source)
    return task is not None and task.ts > 0 and task.ts >= s.floor_ts


def move(client: Any, paths: Paths, source: str, node: str, timeout_s: float) -> ClusterView:
    """Ask for `source` on `node`; return once the node publishes it."""
    v = zk.read_view(client, paths)
    if source not in v.sets:
        raise ReaderError(f"no replication set for source {source!r}; known: {sorted(v.sets)}")
    if node not in v.nodes:
        raise ReaderError(f"no live node {node!r}; live: {sorted(v.nodes)}")
    zk.put(client, paths.move(source), node.encode())

    def done(v: ClusterView) -> bool:
        s = v.sets.get(source)
        return s is not None and s.owner == node and _published_past(v, s)

    return _wait(client, paths, done, timeout_s, f"moving {source} to {node}")


def drain(client: Any, paths: Paths, node: str, timeout_s: float) -> ClusterView:
    """Move every source off `node` and wait until each new owner's watermark passed the last
    event the node published (Pump's graceful offline); the node stays drained (it gets no
    sources) until it registers again."""
    v = zk.read_view(client, paths)
    if node not in v.nodes:
        raise ReaderError(f"no live node {node!r}; live: {sorted(v.nodes)}")
    owned = {s.source for s in v.sets.values() if node in (s.owner, s.target)}
    zk.put(client, paths.drain(node), b"")

    def done(v: ClusterView) -> bool:
        if any(node in (s.owner, s.target) for s in v.sets.values()):
            return False
        return all(_published_past(v, v.sets[s]) for s in owned if s in v.sets)

    return _wait(client, paths, done, timeout_s, f"draining {node}")
