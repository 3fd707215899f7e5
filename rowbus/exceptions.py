"""Errors of the application shell; all derive from `rowbus.protocol.errors.RowbusError`."""

from __future__ import annotations

from rowbus.protocol.errors import RowbusError


class ConfigError(RowbusError):
    """A configuration file or override that cannot be accepted; the message is one line."""


class LocalStackError(RowbusError):
    """An embedded service cannot be installed, started or stopped."""


class PortInUseError(LocalStackError):
    """A port the local stack needs is taken by another process."""


class WaitTimeoutError(RowbusError):
    """A condition did not become true before its deadline; the message says what was awaited."""

    retryable = True


class VerifyError(RowbusError):
    """Tables that cannot be compared (no primary key, incompatible columns)."""
