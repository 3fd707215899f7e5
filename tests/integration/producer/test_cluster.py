"""The reader cluster on real services: 3 nodes, 6 sources (3 databases on each source server)
under a paced load on every source, through kill -9 of the coordinator, kill -9 of another node,
an operator's move and a drain. At the end, per source: exactly the committed transactions in
Kafka (read_committed, no loss, no duplicate) and checkpoints that never moved back.

The steps share the nodes (one cluster per module, steps in file order)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from rowbus.config import Settings
from rowbus.producer.cluster.state import SetState
from rowbus.waiting import wait_for
from tests.integration.producer.cluster_helpers import Cluster, cluster_of
from tests.integration.producer.helpers import ROOT

NODES = {"n1", "n2", "n3"}
# The ≤ 3 s figure is the benchmark's (`python -m benchmarks.cluster`, p50/p99 over many runs);
# this bound is for a loaded CI machine and still fails a failover that waits for anything but
# the dead node's 1.5 s session (e.g. the 6 s default session, or a 0.5 s Kafka re-query).
FAILOVER_BOUND_S = 4.5


@pytest.fixture(scope="module")
def cluster(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with cluster_of(services, tmp_path_factory.mktemp("cluster"), sources=6) as c:
        for node in sorted(NODES):
            c.start(node)
        c.wait_stable(NODES, timeout=90)
        c.start_workloads(pace_s=0.05)
        yield c


def _cli(c: Cluster, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rowbus", "-c", str(c.config), "reader", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _kill_and_measure(c: Cluster, node: str) -> list[float]:
    before = c.view()
    moved = [s.source for s in before.sets.values() if s.owner == node]
    assert moved, f"{node} owns no source"
    killed = c.kill(node)
    survivors = NODES - {node}

    def taken_over() -> list[float] | None:
        v = c.view()
        times = []
        for source in moved:
            owner = v.sets[source].owner
            if owner is None or owner == node or owner not in survivors:
                return None
            at = c.took_over(owner, source, killed)
            if at is None:
                return None
            times.append(at - killed)
        return times

    times = wait_for(taken_over, timeout=60, what=f"the sources of {node} to move")
    # Back to three nodes (the same name registers once ZooKeeper expired the dead session).
    c.start(node)
    c.wait_stable(NODES, timeout=90)
    return times


def test_kill_coordinator(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    times = _kill_and_measure(cluster, coordinator)
    assert cluster.coordinator() != coordinator or coordinator in cluster.view().nodes
    assert max(times) <= FAILOVER_BOUND_S, f"failover took {times}"


def test_kill_node(cluster: Cluster) -> None:
    coordinator = cluster.coordinator()
    node = sorted(NODES - {coordinator})[0]
    times = _kill_and_measure(cluster, node)
    assert max(times) <= FAILOVER_BOUND_S, f"failover took {times}"


def test_move_under_load(cluster: Cluster) -> None:
    v = cluster.wait_stable(NODES)
    source = sorted(v.sets)[0]
    owner = v.sets[source].owner
    target = sorted(NODES - {owner or ""})[0]
    out = _cli(cluster, "move", source, target)
    assert f"{source} publishes on {target}" in out
    after = cluster.view().sets[source]
    assert after.owner == target and after.state is SetState.REPLICATING
    # The balancer may move it on again; wait for quiet before the next step.
    cluster.wait_stable(NODES)


def test_drain(cluster: Cluster) -> None:
    v = cluster.wait_stable(NODES)
    node = max(NODES, key=lambda n: sum(s.owner == n for s in v.sets.values()))
    out = _cli(cluster, "drain", node)
    assert f"{node} drained" in out
    v = cluster.view()
    assert node in v.nodes and node in v.drains
    assert all(node not in (s.owner, s.target) for s in v.sets.values())
    listing = _cli(cluster, "nodes")
    assert f"node {node} (draining): -" in listing


def test_status_shows_the_cluster(cluster: Cluster) -> None:
    """`rowbus status --json` on the live cluster: its coordinator, the drained node, and every
    source replicating on a live node that is not the drained one."""
    v = cluster.wait_stable(NODES)
    done = subprocess.run(
        [sys.executable, "-m", "rowbus", "-c", str(cluster.config), "status", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    shown = json.loads(done.stdout)["cluster"]
    assert shown["coordinator"] == cluster.coordinator()
    nodes = {n["node"]: n for n in shown["nodes"]}
    assert set(nodes) == NODES and all(n["live"] for n in nodes.values())
    assert {n for n, row in nodes.items() if row["draining"]} == set(v.drains)
    sets = {row["source"]: row for row in shown["sets"]}
    assert set(sets) == set(v.sets)
    for row in sets.values():
        assert row["state"] == "replicating" and row["owner"] not in v.drains, row
        assert row["owner"] in NODES
    assert shown["moves"] == []
    # Each node serves the reader series of the tasks it runs (`reader node --metrics-port`):
    # every source's owner has its series, labelled with node and source.
    served: set[tuple[str, str]] = set()
    for node in sorted(NODES):
        port = cluster.metrics_port(node)
        assert port is not None, f"{node} logged no metrics port"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        series = rf'^rowbus_reader_rows_out_total{{node="{node}",source="([^"]+)"}} '
        served.update((source, node) for source in re.findall(series, text, re.M))
    assert {(source, row["owner"]) for source, row in sets.items()} <= served, served


def test_exactly_once_and_checkpoints(cluster: Cluster) -> None:
    started = time.monotonic()
    cluster.stop_workloads()
    counts = cluster.verify()
    assert all(n > 0 for n in counts.values()), counts
    assert time.monotonic() - started < 120
