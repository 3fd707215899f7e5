"""Run by `test_stop_bounds` in a process of its own (with faulthandler, so a crash in a C
library prints every thread's stack): readers whose term ends every few hundred milliseconds
while their commit thread publishes, each reader stopped after a few terms. The stress is
counted, not timed (a busy machine runs fewer terms in a given time, issue #33): a given number
of readers, each stopped at a moment of a chosen term that its election reports, waited for
with a deadline. Prints one JSON line: terms run, readers stopped, errors, librdkafka threads
left at the end.

    python -X faulthandler -m tests.integration.producer.term_stress SPEC.json
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.waiting import wait_for
from tests.conftest import librdkafka_threads

MOMENTS = ("granted", "leading", "lost")
"""Where in its term a reader is stopped, in turn: as the term is granted (its takeover under
way), while it leads (after a number of leadership checks: the tail loop checks at every
event, the commit thread before each commit), or as it notices the term is lost (its step-down
racing the commit thread)."""


class FlappingElection:
    """An `Election` won at once and lost again 0.1-0.5 s later: a term change every few
    hundred milliseconds, whatever the reader is doing (the commit thread often mid-commit).
    `stopping` is set once the reader reaches `moment` (`MOMENTS`) in its `at_term`-th term or
    a later one."""

    def __init__(self, rng: random.Random, at_term: int, moment: str, checks: int) -> None:
        assert moment in MOMENTS
        self._rng = rng
        self._until = 0.0
        self._at_term = at_term
        self._moment = moment
        self._checks = checks
        self.terms = 0
        self.stopping = threading.Event()

    def start(self) -> None:
        return None

    def acquire(self, stop: threading.Event) -> bool:
        if stop.is_set():
            return False
        self.terms += 1
        self._until = time.monotonic() + self._rng.uniform(0.1, 0.5)
        if self._moment == "granted" and self.terms >= self._at_term:
            self.stopping.set()
        return True

    def is_leader(self) -> bool:
        return not self.lost

    @property
    def lost(self) -> bool:
        lost = time.monotonic() > self._until
        if self.terms >= self._at_term:
            if self._moment == "lost" and lost:
                self.stopping.set()
            elif self._moment == "leading" and not lost:
                # (Read by the tail loop and the commit thread at once: a lost decrement
                # only moves the stop by one check.)
                self._checks -= 1
                if self._checks <= 0:
                    self.stopping.set()
        return lost

    def release(self) -> None:
        return None

    def close(self) -> None:
        return None


def main(spec_path: str) -> int:
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    # Collections far more often than by default, so a client held in a reference cycle is
    # collected in whatever thread allocates at that moment, a librdkafka thread running a
    # Python callback among them (confluent-kafka-python #1761, #2129: a client destroyed
    # from its own thread aborts or crashes the process).
    gc.set_threshold(*spec.get("gc_threshold", (50, 2, 2)))
    from rowbus.config import SourceConnection

    source = SourceConnection(**spec["source"])
    services = Services(kafka=spec["kafka"], zookeeper_hosts=None)
    rng = random.Random(spec.get("seed", 33))
    timeout_s = float(spec["reader_timeout_s"])
    terms = readers = 0
    errors: list[str] = []
    for n in range(int(spec["readers"])):
        at_term, moment = rng.randint(4, 6), MOMENTS[n % len(MOMENTS)]
        election = FlappingElection(rng, at_term, moment, checks=rng.randint(1, 200))
        reader = Reader(source, ReaderSettings(**spec["reader"]), services, leadership=election)
        stop = threading.Event()

        def run(reader: Reader = reader, stop: threading.Event = stop) -> None:
            try:
                reader.run(stop)
            except Exception as exc:  # reported in the JSON line
                errors.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=run, name="stress-reader", daemon=True)
        thread.start()
        if not election.stopping.wait(timeout_s):
            errors.append(
                f"reader {n} ran {election.terms} terms in {timeout_s:.0f} s without reaching "
                f"{moment} in term {at_term}"
            )
        stop.set()
        thread.join(30)
        if thread.is_alive():
            errors.append("a reader did not stop within 30 s")
            break
        terms += election.terms
        readers += 1
    with contextlib.suppress(Exception):  # what is left is reported
        wait_for(lambda: not librdkafka_threads(), timeout=10, what="librdkafka threads to end")
    result = {
        "terms": terms,
        "readers": readers,
        "errors": errors,
        "librdkafka_threads": librdkafka_threads(),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
