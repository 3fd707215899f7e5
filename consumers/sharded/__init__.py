"""Sharded consumption (Ptubes' SDK): rows by shard field over N workers and processes, a
storage point per shard in ZooKeeper. See `rowbus.consumers.sharded.subscriber`."""

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
