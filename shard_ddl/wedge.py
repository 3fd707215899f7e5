"""The wedge report: a shard-DDL lock that waits too long is named, never silent (issue 28).

Pure, no I/O; time only through the injected `clock`. A participant calls `WedgeWatch.observe`
with the lock table, its merged watermark and where each source is (its last released
position) once per batch or poll. A lock that is still waiting for shards `after_s` seconds
after this participant first saw it waiting is reported once: the lock, the shards it waits
for and where each of them is. Whether the watermark advanced meanwhile tells the two cases
apart — it advanced: the shards that have not reported are stuck while the others move (a
wedge: a shard that never runs the DDL, or a hold that keeps it from reaching it); it did not:
the whole merge is stalled behind a silent source (`Merger.blocked_by` names it).

The caller logs the report (one WARNING line) and publishes it on the control topic (an
OPERATOR_NOTE with ``wedge``), where `rowbus status` and `rowbus ddl-locks` show it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rowbus.merge.positions import Floor
from rowbus.shard_ddl.locks import LockState, LockTable

DEFAULT_WEDGE_REPORT_S = 60.0


@dataclass(frozen=True, slots=True)
class WedgeReport:
    lock_id: str
    waited_s: float
    waiting_for: tuple[str, ...]
    where: tuple[str, ...]
    """Per shard of `waiting_for`: where it is (its source's last released position)."""
    watermark_from: int
    watermark_to: int

    @property
    def advancing(self) -> bool:
        """Whether the watermark moved while the lock waited (the others kept flowing)."""
        return self.watermark_to > self.watermark_from

    def __str__(self) -> str:
        shards = "; ".join(f"{s} at {w}" for s, w in zip(self.waiting_for, self.where, strict=True))
        moved = (
            f"while the watermark advanced from {self.watermark_from} to {self.watermark_to}"
            if self.advancing
            else f"and the watermark has not moved from {self.watermark_from} (a silent source?)"
        )
        return (
            f"shard-DDL lock {self.lock_id} has waited {self.waited_s:.0f}s {moved}; it waits "
            f"for {len(self.waiting_for)} shard(s): {shards}"
        )


class WedgeWatch:
    """Reports each lock that waits longer than `after_s` once (see the module docstring)."""

    def __init__(
        self, after_s: float = DEFAULT_WEDGE_REPORT_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.after_s = after_s
        self._clock = clock
        self._since: dict[str, tuple[float, int]] = {}
        """lock → (when this participant first saw it waiting, the watermark then)."""
        self._reported: set[str] = set()

    def observe(
        self, table: LockTable, watermark: int, where: Callable[[str], str | None]
    ) -> list[WedgeReport]:
        """The locks to report now. `where(shard)`: the shard's last released position, None
        if unknown."""
        now = self._clock()
        waiting = {
            lock.lock_id: lock
            for lock in table.unresolved()
            if lock.state is LockState.WAITING and lock.waiting_for
        }
        for gone in set(self._since) - set(waiting):
            del self._since[gone]
            self._reported.discard(gone)
        out = []
        for lock_id, lock in sorted(waiting.items()):
            since, mark = self._since.setdefault(lock_id, (now, watermark))
            if lock_id in self._reported or now - since < self.after_s:
                continue
            self._reported.add(lock_id)
            places = tuple(where(shard) or "no position known" for shard in lock.waiting_for)
            out.append(WedgeReport(lock_id, now - since, lock.waiting_for, places, mark, watermark))
        return out

    def stuck(self) -> frozenset[str]:
        """The locks reported and still waiting."""
        return frozenset(self._reported)


def where_in(floors: Mapping[str, Floor]) -> Callable[[str], str | None]:
    """`where` for `observe` from a merger's floors (source → `Floor`): a shard is where its
    source's last released event is (a shard is named ``source/schema.table``)."""

    def where(shard: str) -> str | None:
        source = shard.split("/", 1)[0]
        floor = floors.get(source)
        if floor is None or floor.position is None:
            return None
        _, _, file, offset, _ = floor.position
        return f"{source} released through {file}:{offset}"

    return where
