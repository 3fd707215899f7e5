"""One reader task on a node: the existing per-source `Reader` in a thread, led by a `TaskLease`
instead of its own election.

The reader's loop already prepares before it asks to lead (`TermOpener.prepare`: source checks,
Kafka clients, topics) and then blocks in `acquire`: that wait is the Prepare phase of a move.
The coordinator's grant (the set turns Replicating on this node) ends it; the reader then
fences the previous owner (``init_transactions`` on the source's transactional.id), loads the
committed checkpoint and publishes from there — so exactly-once rests on Kafka, as before.
Stopping the task (`stop()`) lets the reader finish its open transaction, commit it with a final
watermark and exit: the owner's half of a move.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rowbus.producer.cluster.balance import LoadMeter
from rowbus.producer.cluster.state import Phase, TaskStatus
from rowbus.producer.reader import Reader

log = logging.getLogger(__name__)


class TaskLease:
    """An `Election` granted by the coordinator: `acquire` waits for `grant()`; `lost` turns true
    when the node's ZooKeeper session is lost during a term (the coordinator hands the source to
    another node then; Kafka fences whichever publishes late). A new term starts only while the
    session is connected."""

    def __init__(self, connected: Callable[[], bool]) -> None:
        self._connected = connected
        self._granted = threading.Event()
        self._lost = threading.Event()
        self.waiting = threading.Event()
        """Set while the reader waits in `acquire` (it has prepared)."""
        self.leading = False

    def grant(self) -> None:
        self._granted.set()

    def session_lost(self) -> None:
        if self.leading:
            self._lost.set()

    def start(self) -> TaskLease:
        return self

    def acquire(self, stop: threading.Event) -> bool:
        self._lost.clear()
        self.waiting.set()
        try:
            while not stop.is_set():
                if self._granted.wait(0.05) and self._connected():
                    self.leading = True
                    return True
            return False
        finally:
            self.waiting.clear()

    def is_leader(self) -> bool:
        return self.leading and not self.lost

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def release(self) -> None:
        self.leading = False

    def close(self) -> None:
        self.leading = False


class ReaderTask:
    """A thread running `reader` under `lease` until `stop()`; `status()` for the node's znode."""

    def __init__(self, reader: Reader, lease: TaskLease, load_window_s: float = 10.0) -> None:
        self.reader = reader
        self.load_window_s = load_window_s
        self._meter: LoadMeter | None = None
        """Measures from the grant on: rows published while leading are the source's load."""
        self.lease = lease
        self.source = reader.source.name
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"task-{self.source}", daemon=True)

    def start(self) -> ReaderTask:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.reader.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the node, which restarts it
            self.error = exc
            log.error("reader task %s failed: %s", self.source, exc)

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def status(self) -> TaskStatus:
        ts = self.reader.metrics.watermark_ts
        if self.lease.leading:
            if self._meter is None:
                self._meter = LoadMeter(self.load_window_s)
            return TaskStatus(Phase.REPLICATING, ts, self._meter.rate(self.reader.metrics.rows))
        if self.lease.waiting.is_set():
            return TaskStatus(Phase.PREPARED, ts)
        return TaskStatus(Phase.PREPARING, ts)
