"""The one election interface: which of several contenders leads (a source's readers, the
apply jobs that share shard-DDL targets).

Lifecycle: construct (no I/O), `start()` connects; `acquire(stop)` blocks until this contender
leads (or `stop` is set); `is_leader()` answers at once, taking the lead if it is free; `lost`
turns true the moment leadership can no longer be trusted (the session was suspended or lost):
a leader must stop writing at once — a frozen leader learns this only when it wakes, so writes
are fenced elsewhere too (Kafka's transactional.id, the sink's head row). `release()` gives the
lead up, `close()` ends the session.

Implementations: `Unopposed` (a single contender, no coordination service), and the ZooKeeper
elections of the reader (`rowbus.producer.leader`, kazoo's lock recipe: contenders queue in
order) and of shard DDL (`rowbus.shard_ddl.election`, one ephemeral node that a
restarted job with the same identity takes over at once).
"""

from __future__ import annotations

import threading
from typing import Protocol


class Election(Protocol):
    def start(self) -> object: ...
    def acquire(self, stop: threading.Event) -> bool: ...
    def is_leader(self) -> bool: ...
    @property
    def lost(self) -> bool: ...
    def release(self) -> None: ...
    def close(self) -> None: ...


class Unopposed:
    """The only contender: it always leads and never loses."""

    def start(self) -> Unopposed:
        return self

    def acquire(self, stop: threading.Event) -> bool:
        return not stop.is_set()

    def is_leader(self) -> bool:
        return True

    @property
    def lost(self) -> bool:
        return False

    def release(self) -> None:
        """Nothing to give up."""

    def close(self) -> None:
        """No session."""
