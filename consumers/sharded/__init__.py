"""Sharded consumption (Ptubes' SDK): rows by shard field over N workers and processes, a
storage point per shard in ZooKeeper.

- `subscriber`: `ShardedSubscriber`, the entry point;
- `assignment`: which shard a row is in, which process owns which shard (pure);
- `membership`: the ZooKeeper side (members, ownership, storage points).
"""

from rowbus.consumers.sharded.assignment import Rebalance, ShardKey, assign, combine, rebalance
from rowbus.consumers.sharded.subscriber import ShardedSubscriber, ShardTransaction

__all__ = [
    "Rebalance",
    "ShardKey",
    "ShardTransaction",
    "ShardedSubscriber",
    "assign",
    "combine",
    "rebalance",
]
