"""Public test doubles for code built on rowbus (and for rowbus' own tests): routes for shard
groups, protocol event factories, a fake clock and an in-memory checkpoint store.

Nothing here does I/O; see `rowbus.testing.events` for building events and
`rowbus.consumers.stores.MemoryCheckpointStore` for the in-memory store.

- `events`: builders of protocol events (a table, a row change, a DDL, a watermark);
- `messages`: a consumed Kafka message as readers of confluent-kafka's use it;
- `spark_cluster`: a Spark standalone cluster on loopback (it starts processes: the one
  exception to "no I/O", for the standalone e2e test and `benchmarks.apply --cluster`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rowbus.routing.routes import Router, RouteSettings
from rowbus.shard_ddl.groups import RouteFn


def shard_routes(rules: Sequence[tuple[str, str]]) -> RouteFn:
    """A shard-group route function from ``(match, target)`` pairs, through the one router
    (every rule sharded): what `ShardGroups.build` takes."""
    return Router([RouteSettings(match=m, target=t, sharded=True) for m, t in rules]).shard_target


class FakeClock:
    """A clock a test moves by hand: ``clock()`` reads it, ``clock.advance(s)`` moves it."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock never moves back")
        self.now += seconds
        return self.now


__all__ = ["FakeClock", "shard_routes"]
