"""Errors of shard-DDL coordination.

::

    SubscriberError                  (rowbus.merge.exceptions)
    └── ShardDdlError                shard-DDL coordination cannot go on
        ├── DdlTextError             a statement is not a DDL the coordination handles
        ├── ControlTopicError        the control topic cannot be read or written (`retryable`
        │                            follows the Kafka error)
        ├── ElectionError            ZooKeeper cannot be reached for the coordinator election
        ├── DownstreamDdlError       the owner failed to execute a DDL on the sink (keeps the
        │                            MySQL error code in `code`)
        └── LockStateError           an operator action does not fit the lock's state
"""

from __future__ import annotations

from rowbus.merge.exceptions import SubscriberError


class ShardDdlError(SubscriberError):
    """Shard-DDL coordination cannot go on."""


class DdlTextError(ShardDdlError):
    """A statement is not a DDL the coordination handles."""


class ControlTopicError(ShardDdlError):
    """The control topic cannot be read or written."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ElectionError(ShardDdlError):
    """ZooKeeper cannot be reached for the coordinator election."""

    retryable = True


class DownstreamDdlError(ShardDdlError):
    """Executing a DDL on the sink failed."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class LockStateError(ShardDdlError):
    """An operator action does not fit the lock's state (unknown lock, already resolved…)."""
