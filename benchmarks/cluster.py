"""Reader cluster failover and move times: N nodes, M sources under a paced load; kill -9 of a
node (alternately the coordinator and another node) and operator moves, each repeated; p50 and
p99 of the time to the first record published by the new owner, then an exactly-once check of
every source.

    python -m benchmarks.cluster --runs 10                  # the `rowbus local up` stack
    python -m benchmarks.cluster --runs 10 --test-stack     # the tests' stack (port offset env)

Failover: from kill -9 to the new owner's first committed Kafka transaction for each source the
dead node owned (its "took over" log line). Move: from the request to the same line on the target.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rowbus.config import Settings, load_settings
from rowbus.producer.cluster import admin
from rowbus.waiting import wait_for

# The tests' cluster harness (node processes, workloads, the exactly-once check), imported by
# name so that mypy checks the packages without the loosely typed tests.
Cluster = Any


def _harness() -> Any:
    return importlib.import_module("tests.integration.producer.cluster_helpers")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: no samples"
    return (
        f"{name}: n={len(values)} p50 {_pct(values, 0.5):.2f}s p99 {_pct(values, 0.99):.2f}s "
        f"min {min(values):.2f}s max {max(values):.2f}s mean {statistics.fmean(values):.2f}s"
    )


def failover_run(c: Cluster, nodes: set[str], node: str) -> list[float]:
    moved = [s.source for s in c.view().sets.values() if s.owner == node]
    killed = c.kill(node)

    def taken() -> list[float] | None:
        v = c.view()
        out = []
        for source in moved:
            owner = v.sets[source].owner
            at = c.took_over(owner, source, killed) if owner and owner != node else None
            if at is None:
                return None
            out.append(at - killed)
        return out

    times = wait_for(taken, timeout=60, what=f"the sources of {node} to move")
    c.start(node)
    c.wait_stable(nodes, timeout=120)
    return times


def move_run(c: Cluster, nodes: set[str], i: int) -> float:
    v = c.wait_stable(nodes, timeout=120)
    source = sorted(v.sets)[i % len(v.sets)]
    owner = v.sets[source].owner
    target = sorted(nodes - {owner or ""})[i % (len(nodes) - 1)]
    asked = time.time()
    admin.move(c.zk, c.paths, source, target, timeout_s=60)
    at = wait_for(
        lambda: c.took_over(target, source, asked), timeout=30, what=f"{target} publishing"
    )
    return float(at - asked)


@contextlib.contextmanager
def _services(test_stack: bool, config: str | None) -> Iterator[Settings]:
    if test_stack:
        services = importlib.import_module("tests.services")
        with services.session_services() as settings:
            yield settings
    else:
        yield load_settings(Path(config) if config else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", default=None, help="rowbus configuration (default: local)")
    parser.add_argument("--test-stack", action="store_true", help="the tests' embedded stack")
    parser.add_argument("--runs", type=int, default=10, help="kills and moves each (default 10)")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--sources", type=int, default=6)
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between transactions")
    args = parser.parse_args(argv)
    nodes = {f"n{i + 1}" for i in range(args.nodes)}
    failovers: list[float] = []
    moves: list[float] = []
    with (
        _services(args.test_stack, args.config) as settings,
        tempfile.TemporaryDirectory(prefix="rowbus-bench-cluster-") as tmp,
        _harness().cluster_of(settings, Path(tmp), args.sources) as c,
    ):
        for node in sorted(nodes):
            c.start(node)
        c.wait_stable(nodes, timeout=120)
        c.start_workloads(pace_s=args.pace)
        for i in range(args.runs):
            coordinator = c.coordinator()
            others = sorted(nodes - {coordinator})
            victim = coordinator if i % 2 == 0 else others[i % len(others)]
            times = failover_run(c, nodes, victim)
            failovers += times
            print(
                f"kill -9 {victim}{' (coordinator)' if victim == coordinator else ''}: "
                + ", ".join(f"{t:.2f}s" for t in times),
                flush=True,
            )
        for i in range(args.runs):
            moves.append(move_run(c, nodes, i))
            print(f"move {i + 1}: {moves[-1]:.2f}s", flush=True)
        c.stop_workloads()
        rows = c.verify()
    print(_summary("failover (kill -9 → first record of the new owner)", failovers))
    print(_summary("move (request → first record of the target)", moves))
    total = sum(rows.values())
    print(f"exactly once: {total} row events over {len(rows)} sources, 0 lost, 0 duplicated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
