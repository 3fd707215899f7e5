"""A consumed Kafka message, as code that reads confluent-kafka's uses it (which cannot be
built outside a consumer): for tests and benchmarks of readers of rowbus topics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rowbus.protocol.codec import Encoding, encode


@dataclass
class Message:
    """What `confluent_kafka.Message` answers of value, headers, offset and error."""

    data: bytes | None
    header_list: list[tuple[str, bytes]] | None
    at: int
    failure: Any = None

    @classmethod
    def of(cls, record: Any, offset: int, encoding: Encoding = Encoding.PROTOBUF) -> Message:
        """`record` encoded as a reader publishes it, at `offset`."""
        value, headers = encode(record, encoding)
        return cls(value, headers, offset)

    def value(self) -> bytes | None:
        return self.data

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.header_list

    def offset(self) -> int:
        return self.at

    def error(self) -> Any:
        return self.failure
