"""Errors of the Subscriber SDK.

The subscriber side's root, `SubscriberError`, and the engine's errors live with the merge engine
(`rowbus.merge.exceptions`, which draws the whole tree); they are re-exported here so a user
catches every subscriber error from one module. Only sharded consumption adds its own:

::

    SubscriberError                  (rowbus.merge.exceptions)
    └── ShardingError                sharded consumption: ZooKeeper failed, the shard count
                                     disagrees, or a shard's handler failed

Foreign errors are translated by the client seams (`rowbus.clients`): a Kafka failure arrives as
`rowbus.clients.errors.KafkaClientError` (`retryable` follows librdkafka).
"""

from __future__ import annotations

from rowbus.clients.errors import KafkaClientError
from rowbus.merge.exceptions import (
    CheckpointError,
    MergeError,
    StartPositionError,
    SubscriberError,
)
from rowbus.routing.exceptions import RoutingError

__all__ = [
    "CheckpointError",
    "KafkaClientError",
    "MergeError",
    "RoutingError",
    "ShardingError",
    "StartPositionError",
    "SubscriberError",
]


class ShardingError(SubscriberError):
    """Sharded consumption cannot go on (membership, ownership, or a shard's handler)."""
