"""The Subscriber's flow control against a broker that hands a backlog over partition after
partition (as noida-db does, ignoring fetch sizes): it pauses the partitions ahead of the merge,
so the buffer stays near `read_ahead` and the merge releases as it reads, in order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.merger import Merger
from rowbus.protocol.codec import encode
from rowbus.protocol.events import Event
from rowbus.testing.events import resolved, row

TOPIC = "t"
PARTITIONS = 3
TXNS = 300


@dataclass
class _Msg:
    partition_: int
    offset_: int
    value_: bytes
    headers_: list[tuple[str, bytes | None]]

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return self.value_

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self.headers_


class BacklogBroker:
    """A KafkaReader stand-in: the first unpaused partition's records first, then the next."""

    def __init__(self, logs: dict[int, list[Event]]) -> None:
        self.logs = {
            p: [_Msg(p, o, *_encoded(e)) for o, e in enumerate(events)]
            for p, events in logs.items()
        }
        self.next = dict.fromkeys(logs, 0)
        self.paused: set[int] = set()

    def pause(self, tps: list[tuple[str, int]]) -> None:
        self.paused.update(p for _, p in tps)

    def resume(self, tps: list[tuple[str, int]]) -> None:
        self.paused.difference_update(p for _, p in tps)

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        for p, log in self.logs.items():
            if p not in self.paused and self.next[p] < len(log):
                got = log[self.next[p] : self.next[p] + n]
                self.next[p] += len(got)
                return got
        return []


def _encoded(event: Event) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    value, headers = encode(event)
    return value, list(headers)


def _backlog() -> dict[int, list[Event]]:
    """`TXNS` transactions of one row per partition, each followed by a Resolved everywhere."""
    logs: dict[int, list[Event]] = {p: [] for p in range(PARTITIONS)}
    for k in range(1, TXNS + 1):
        for p in range(PARTITIONS):
            logs[p].append(row(k, after=(k * 10 + p, "v"), index=p, count=PARTITIONS))
        for p in range(PARTITIONS):
            logs[p].append(resolved(k))
    return logs


@pytest.mark.parametrize("read_ahead", [None, 60])
def test_partitions_ahead_of_the_merge_are_paused_and_the_merge_keeps_releasing(
    read_ahead: int | None,
) -> None:
    broker = BacklogBroker(_backlog())
    sub = Subscriber({}, [TOPIC], read_ahead=read_ahead, batch_size=20, memory_limit=None)
    sub._reader = broker  # type: ignore[assignment]
    sub._merger = Merger([(TOPIC, p, "s1") for p in range(PARTITIONS)])
    released: list[int] = []
    peak = 0
    first_release_at = None
    for _ in range(10_000):
        txns = sub.poll(0)
        peak = max(peak, sub.merger.buffered)
        if txns and first_release_at is None:
            first_release_at = sum(broker.next.values())
        released += [t.ts for t in txns]
        if len(released) == TXNS:
            break
    assert released == list(range(1, TXNS + 1))
    records = PARTITIONS * TXNS * 2
    assert first_release_at is not None
    if read_ahead is None:
        # without flow control: nothing is released before the last partition is reached,
        # and the merge holds two partitions' rows
        assert first_release_at > 2 * records // PARTITIONS
        assert peak >= 2 * TXNS
    else:
        assert first_release_at < records // 4
        assert peak <= read_ahead + 20
        assert sub.pauses > 0 and broker.paused == {p for _, p in sub.paused}
