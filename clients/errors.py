"""Errors of the foreign clients, as the seams translate them::

    RowbusError                   (rowbus.protocol.errors)
    └── ClientError               a foreign client failed; `code` keeps its own code
        ├── KafkaClientError      confluent-kafka (`fenced` when another producer took over)
        ├── MySQLClientError      pymysql (`kind` says unavailable / rolled back / denied / tls /
        │                         other)
        ├── SecretUnavailableError  a password file or variable the configuration names is missing
        └── ZooKeeperClientError  kazoo

`retryable` follows the client: a broker briefly away or a deadlock is retryable; a fenced
producer, a denied grant or a bad statement is not.
"""

from __future__ import annotations

from rowbus.protocol.errors import RowbusError


class ClientError(RowbusError):
    """A foreign client failed."""

    def __init__(self, message: str, code: str | int | None = None, *, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.retryable = retryable


class KafkaClientError(ClientError):
    """confluent-kafka failed; `fenced` is true when another producer with the same
    transactional.id took over (this one is a zombie and must stop)."""

    def __init__(
        self,
        message: str,
        code: str | int | None = None,
        *,
        retryable: bool = False,
        fenced: bool = False,
    ) -> None:
        super().__init__(message, code, retryable=retryable)
        self.fenced = fenced


class MySQLClientError(ClientError):
    """pymysql failed; see `rowbus.clients.mysql.Kind` for `kind`."""

    def __init__(self, message: str, code: int | None, kind: str, *, retryable: bool) -> None:
        super().__init__(message, code, retryable=retryable)
        self.kind = kind


class ZooKeeperClientError(ClientError):
    """kazoo failed or ZooKeeper could not be reached in time."""


class SecretUnavailableError(ClientError):
    """A password's file or environment variable named in the configuration cannot be read."""
