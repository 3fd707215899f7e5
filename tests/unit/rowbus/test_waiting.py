from __future__ import annotations

import pytest

from rowbus.exceptions import WaitTimeoutError
from rowbus.waiting import wait_for


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def test_returns_the_first_truthy_result():
    calls = iter([None, 0, "ready"])
    fake = FakeTime()
    assert (
        wait_for(lambda: next(calls), timeout=5, what="x", clock=fake.clock, pause=fake.pause)
        == "ready"
    )


def test_timeout_says_what_was_awaited_and_the_last_error():
    fake = FakeTime()

    def probe() -> bool:
        raise ConnectionRefusedError("refused")

    with pytest.raises(
        WaitTimeoutError, match=r"after 2\.0s waiting for the broker \(last error: refused\)"
    ):
        wait_for(probe, timeout=2, what="the broker", clock=fake.clock, pause=fake.pause)
    assert 2 <= fake.now < 3


def test_stop_on_ends_the_wait_at_once():
    fake = FakeTime()

    def probe() -> bool:
        raise KeyError("dead")

    with pytest.raises(KeyError):
        wait_for(
            probe, timeout=60, what="x", clock=fake.clock, pause=fake.pause, stop_on=(KeyError,)
        )
    assert fake.now == 0
