"""Wait for a condition with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from rowbus.exceptions import WaitTimeoutError

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    stop_on: tuple[type[Exception], ...] = (),
) -> T:
    """Poll `condition` until it returns something truthy, and return that.

    Exceptions raised by `condition` count as "not yet"; the last one is chained to the
    `WaitTimeoutError` so a failing probe explains itself. Exceptions of a `stop_on` type end the
    wait at once: the condition can never become true (e.g. the process died).
    """
    deadline = clock() + timeout
    last_error: Exception | None = None
    step = interval
    while True:
        try:
            result = condition()
        except stop_on:
            raise
        except Exception as exc:  # noqa: BLE001 - a probe failing is the "not yet" case
            last_error = exc
            result = None
        if result:
            return result
        if clock() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise WaitTimeoutError(
                f"timed out after {timeout:.1f}s waiting for {what}{detail}"
            ) from (last_error)
        pause(step)
        step = min(step * 1.5, 0.5)
