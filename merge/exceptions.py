"""Errors of the merge engine, the root of every subscriber-side error.

::

    RowbusError                      (rowbus.protocol.errors)
    └── SubscriberError              the subscriber cannot go on
        ├── CheckpointError          a checkpoint cannot be loaded or saved, or would move backwards
        ├── SpillFullError           the spill folder's disk refused a write (full, or a file-size
        │                            limit)
        ├── StartPositionError       a start position (timestamp, GTID, binlog position) cannot
        │                            be resolved
        ├── MergeError               the input breaks the protocol's ordering rules (e.g. a
        │                            transaction still incomplete after the watermark passed it)
        ├── RoutingError             (rowbus.routing.exceptions) a route cannot be applied
        ├── ShardDdlError            (rowbus.shard_ddl.exceptions) shard-DDL coordination
        └── ShardingError            (rowbus.consumers.exceptions) sharded consumption

The root lives here, in the lowest package of the subscriber side, because the merge engine,
routing and shard-DDL coordination serve the Subscriber SDK and the Spark apply job alike.
"""

from __future__ import annotations

from rowbus.protocol.errors import RowbusError

__all__ = [
    "CheckpointError",
    "MergeError",
    "SpillFullError",
    "StartPositionError",
    "SubscriberError",
]


class SubscriberError(RowbusError):
    """The subscriber cannot go on."""


class SpillFullError(SubscriberError):
    """The spill folder's disk refused a write: the subscriber cannot buffer past its memory
    limit, so it stops (it resumes from its last checkpoint once there is room)."""


class CheckpointError(SubscriberError):
    """A checkpoint store failed, or a checkpoint would move backwards."""


class StartPositionError(SubscriberError):
    """A requested start position cannot be resolved to Kafka offsets."""


class MergeError(SubscriberError):
    """The events break the ordering rules the merge relies on."""
