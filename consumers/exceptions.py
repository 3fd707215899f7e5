"""Errors of the subscriber side.

::

    RowbusError                      (rowbus.protocol.errors)
    └── SubscriberError              the subscriber cannot go on
        ├── CheckpointError          a checkpoint cannot be loaded or saved, or would move backwards
        ├── StartPositionError       a start position (timestamp, GTID, binlog position) cannot
        │                            be resolved
        ├── MergeError               the input breaks the protocol's ordering rules (e.g. a
        │                            transaction still incomplete after the watermark passed it)
        ├── RoutingError             a route cannot be applied to a table
        └── ShardingError            sharded consumption: ZooKeeper failed, the shard count
                                     disagrees, or a shard's handler failed

Foreign errors are translated by the client seams (`rowbus.clients`): a Kafka failure arrives as
`rowbus.clients.errors.KafkaClientError` (`retryable` follows librdkafka).
"""

from __future__ import annotations

from rowbus.clients.errors import KafkaClientError
from rowbus.protocol.errors import RowbusError

__all__ = [
    "CheckpointError",
    "KafkaClientError",
    "MergeError",
    "RoutingError",
    "ShardingError",
    "StartPositionError",
    "SubscriberError",
]


class SubscriberError(RowbusError):
    """The subscriber cannot go on."""


class CheckpointError(SubscriberError):
    """A checkpoint store failed, or a checkpoint would move backwards."""


class StartPositionError(SubscriberError):
    """A requested start position cannot be resolved to Kafka offsets."""


class MergeError(SubscriberError):
    """The events break the ordering rules the merge relies on."""


class RoutingError(SubscriberError):
    """A routing rule that cannot be applied to a table (no match under ``unrouted: error``, a
    key column filtered out, a rename onto an existing name); the caller adds the position."""


class ShardingError(SubscriberError):
    """Sharded consumption cannot go on (membership, ownership, or a shard's handler)."""
