"""The shard-DDL hold rule: what of a transaction waits for a shard's DDL lock, what goes now.

Pure, no I/O. One rule for every apply path — the `Merger` (the Spark job's planner, in both
apply modes) and `rowbus.consumers.sharded_apply.ShardedApply` (a plain `Subscriber`):

- the *held* set is the tables (shards) whose own DDL is refused by the gate (waiting for its
  lock) — only those, never a table merely written together with one;
- a transaction that touches only held tables waits, in order behind the DDL;
- a transaction that touches none goes;
- a transaction that spans held tables and others is **split**: its events on the other tables
  go now, its events on the held tables follow when the lock is done.

Splitting gives up the atomicity of such a transaction downstream (for a while, the sink has its
part on the shared table but not its part on the shard). That is the price of liveness, as in
TiDB-DM's pessimistic mode: holding the whole transaction would hold the shared table, and with
it (through the next transaction writing it and another shard) every shard, so the shards that
still have to reach the DDL never would and the lock could never complete (issue 28).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Hold(Generic[T]):
    """The decision for one transaction: its tables that `go` now and those that `stay`."""

    go: frozenset[T]
    stay: frozenset[T]

    @property
    def held(self) -> bool:
        """Whether some of it waits."""
        return bool(self.stay)

    @property
    def split(self) -> bool:
        """Whether it is cut in two: part goes now, part waits."""
        return bool(self.go) and bool(self.stay)


def hold(tables: Set[T], held: Set[T]) -> Hold[T]:
    """The hold rule (module docstring) for a transaction touching `tables` while `held` wait."""
    stay = frozenset(tables & held)
    return Hold(frozenset(tables - stay), stay)
