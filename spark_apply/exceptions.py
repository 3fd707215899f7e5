"""Errors of the apply job, under `rowbus.protocol.errors.RowbusError`::

RowbusError
└── ApplyError                 an event cannot be applied; nothing of the batch is committed
    ├── BadEventError          one event cannot be applied (type mismatch, missing target
    │                          table or column, bad routing); names its position and reason
    ├── CheckpointConflictError the sink's checkpoint is not the one this batch builds on
    ├── LogChangedError        a partition no longer holds records the job read (a broker that
    │                          lost acknowledged records and reused their offsets)
    ├── MissingTopicError      a data topic the job reads does not exist (not created yet, or
    │                          deleted under the running job)
    ├── SinkUnavailableError   the sink cannot be reached (retryable)
    └── TransactionConflictError the sink rolled a transaction back: deadlock or lock wait
                               timeout (retryable; the sink retries it itself first)
"""

from __future__ import annotations

from rowbus.protocol.errors import RowbusError


class ApplyError(RowbusError):
    """The apply job cannot go on."""


class BadEventError(ApplyError):
    """One event cannot be applied; `position` says where it is (Kafka and binlog)."""

    def __init__(self, reason: str, position: str) -> None:
        self.reason = reason
        self.position = position
        super().__init__(f"{position}: {reason}")


class CheckpointConflictError(ApplyError):
    """The batch does not build on the checkpoint the sink holds (another driver, or a Spark
    checkpoint that does not belong to this sink)."""


class LogChangedError(ApplyError):
    """Records the job already read at `offset` of ``topic[partition]`` (below `end`, where its
    next range starts) are gone or replaced: reading on would skip what the broker now holds
    there (`boundaries`)."""

    def __init__(self, topic: str, partition: int, offset: int, end: int, what: str) -> None:
        self.topic, self.partition, self.offset, self.end = topic, partition, offset, end
        super().__init__(
            f"{topic}[{partition}]@{offset}: the record the job read there {what} (the job has "
            f"read to {end}): the broker lost acknowledged records and reused their offsets, "
            "so the job stops rather than skip what is there now; run `rowbus verify` and "
            'rebuild what differs (docs/operations.md, "A broker that loses records")'
        )


class MissingTopicError(ApplyError):
    """A data topic the job reads does not exist on the broker."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"the data topic {topic} does not exist: start the reader of its source (it creates "
            "the topic), or check apply.sources and apply.topic_template"
        )


class SinkUnavailableError(ApplyError):
    """The sink database cannot be reached."""

    retryable = True


class TransactionConflictError(ApplyError):
    """The sink rolled the transaction back (InnoDB deadlock 1213, lock wait timeout 1205); the
    whole transaction may run again."""

    retryable = True
