"""Errors of the binlog reader, all under `ReaderError`::

    ReaderError                   the reader cannot go on
    ├── ServerMisconfiguredError  the source lacks a binlog setting or a privilege (fatal)
    ├── PositionPurgedError       the start/resume position is no longer on the server (fatal)
    ├── BadStartPositionError     a start position that cannot be parsed or found (fatal)
    ├── CorruptBinlogError        an event that cannot be read back, e.g. corrupt zlib (fatal)
    ├── UnsafeSettingError        a setting changed that the checkpoint cannot resume under (fatal)
    ├── SourceUnavailableError    the server cannot be reached or dropped the stream (retryable)
    ├── PublishError              Kafka refused a record or a transaction (retryable unless fatal)
    │   └── FencedError           another reader took the source over (fatal for this leadership)
    └── LeadershipLostError       the ZooKeeper session was suspended or lost (retryable)

Foreign errors (pymysql, KafkaError, kazoo) are translated where they are raised — the binlog seam
(`rowbus.producer.binlog`), the publisher (`rowbus.producer.publisher`) and the election
(`rowbus.producer.leader`) — with ``raise … from exc`` so the original code stays reachable.
"""

from __future__ import annotations

from rowbus.protocol.errors import RowbusError


class ReaderError(RowbusError):
    """The binlog reader cannot go on."""


class ServerMisconfiguredError(ReaderError):
    """The source server does not write the binlog the reader needs, or denies a privilege."""


class PositionPurgedError(ReaderError):
    """The position to start or resume from was purged from the server's binlog."""


class BadStartPositionError(ReaderError):
    """A start position that is malformed or cannot be located in the binlog."""


class CorruptBinlogError(ReaderError):
    """An event whose bytes cannot be read back into what the server logged: a compressed event
    that does not inflate to its declared length, or whose checksum does not match."""


class UnsafeSettingError(ReaderError):
    """A setting changed between restarts in a way the checkpoint's state cannot continue under
    without corrupting consumers' data (e.g. markers turned off mid keyless snapshot)."""


class SourceUnavailableError(ReaderError):
    """The source server cannot be reached, or it closed the replication stream."""

    retryable = True


class PublishError(ReaderError):
    """Kafka refused a record, a flush or a transaction.

    `code` is librdkafka's error code name when there is one.
    """

    retryable = True

    def __init__(self, message: str, code: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class FencedError(PublishError):
    """Another producer with this source's transactional.id took over: this one is a zombie."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message, code, retryable=False)


class LeadershipLostError(ReaderError):
    """The ZooKeeper session was suspended or lost while leading: stop publishing at once."""

    retryable = True
