"""The root of every rowbus exception, and the protocol's own errors.

The root lives here because `protocol/` is the one package every other package depends on::

    RowbusError
    ├── ProtocolError            protocol/  — bytes that are not a valid event
    ├── ConfigError              rowbus/    — a setting that is missing, unknown or of a wrong type
    ├── LocalStackError          rowbus/    — the embedded services cannot be installed or started
    ├── ReaderError              producer/  — the binlog reader cannot go on
    ├── SubscriberError          consumers/ — the subscriber cannot go on
    └── ApplyError               spark_apply/ — an event cannot be applied to the sink

`retryable` says whether doing the same thing again may succeed (a broker that is briefly away)
or whether an operator must change something first.
"""

from __future__ import annotations


class RowbusError(Exception):
    """Base of all rowbus errors."""

    retryable: bool = False


class ProtocolError(RowbusError):
    """Bytes or headers that do not decode to a valid event.

    `position` is the Kafka position as ``topic[partition]@offset`` when it is known, so the
    message names where the bad record sits. `fix` says what to do about it; a located record
    without one gets the advice every consumer gives (`at`).
    """

    def __init__(self, reason: str, position: str | None = None, fix: str | None = None) -> None:
        self.reason = reason
        self.position = position
        self.fix = fix
        said = f"{position}: {reason}" if position else reason
        super().__init__(f"{said}; {fix}" if fix else said)

    def at(self, position: str) -> ProtocolError:
        """The same error, located at a Kafka position (``topic[partition]@offset``): a record
        no consumer can go past, so the message says where it came from if it does not say
        what to do already."""
        topic = position.rpartition("[")[0] or position
        fix = self.fix or (
            f"no rowbus reader writes such a record: find what else writes to {topic} (a "
            "consumer cannot go past it)"
        )
        return ProtocolError(self.reason, position, fix)
