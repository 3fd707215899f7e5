"""Which one set the coordinator moves to balance the nodes (pure): by count, and by the load
each owner measured (rows/s over a window, `LoadMeter`), with hysteresis so it does not flap.

- Count: when the nodes' set counts differ by more than the allowed skew, one set moves from the
  node with the most to the node with the fewest; of that node's sets, the one that leaves the
  two nodes' loads closest. The skew is 1 until every set's load is measured, then
  `LoadPolicy.count_skew` (so a node may carry more light sources than a heavy one).
- Load: only once every replicating set has a measured load (a just-moved set has none until its
  new owner's window is full, so a move is never judged on half a measurement). A set moves from
  a busier node to an idler one when their gap is at least `min_gap` rows/s and the busier
  carries `ratio` times the idler's load (a dead band against noise), the move shrinks that gap
  by at least `improvement` (no shuffling for crumbs), and the counts stay within the skew.

Why it cannot flap with loads held still: a count move happens only while the count spread
exceeds the skew and never leaves a larger one; a load move leaves the spread within the skew,
so no count move follows it, and it lowers the sum of squared node loads by 2·s·(gap - s) > 0
(0 < s < gap). Both quantities are bounded below over finitely many placements, so the moves
stop (`tests/unit/producer/test_cluster_balance.py` checks it with hypothesis).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadPolicy:
    min_gap: float = 200.0
    """Rows/s: two nodes whose loads differ by less count as equally loaded."""
    ratio: float = 1.5
    """The busier node must carry at least this many times the idler one's load."""
    improvement: float = 0.25
    """A move must shrink the two nodes' load gap by at least this fraction."""
    count_skew: int = 2
    """With every load measured, node set counts may differ by this much."""


DEFAULT_POLICY = LoadPolicy()


def pick_move(
    owners: Mapping[str, str],
    loads: Mapping[str, float | None],
    movable: set[str],
    nodes: list[str],
    policy: LoadPolicy = DEFAULT_POLICY,
) -> tuple[str, str] | None:
    """One (source, target node) to move, or None. `owners`: each replicating set's owner;
    `loads`: each set's measured rows/s (None: not measured yet); `movable`: the sets the
    balancer may move (not placed by an operator); `nodes`: the eligible nodes."""
    if len(nodes) < 2:
        return None
    count = dict.fromkeys(nodes, 0)
    load = dict.fromkeys(nodes, 0.0)
    for source, owner in owners.items():
        if owner in count:
            count[owner] += 1
            load[owner] += loads.get(source) or 0.0
    measured = bool(owners) and all(loads.get(s) is not None for s in owners)
    skew = policy.count_skew if measured else 1

    def on(node: str) -> list[str]:
        return sorted(s for s, o in owners.items() if o == node and s in movable)

    def rate(source: str) -> float:
        return loads.get(source) or 0.0

    # Count first: the node with the fewest sets takes one from the node with the most.
    idlest = min(nodes, key=lambda n: (count[n], load[n], n))
    for busiest in sorted(nodes, key=lambda n: (-count[n], -load[n], n)):
        if count[busiest] - count[idlest] <= skew:
            break
        candidates = on(busiest)
        if candidates:
            gap = load[busiest] - load[idlest]
            best = min(candidates, key=lambda s: (abs(gap - 2 * rate(s)), s))
            return best, idlest
    if not measured:
        return None
    # Then load: the first (busier, idler) pair, busiest first, with a set worth moving.
    by_load = sorted(nodes, key=lambda n: (load[n], n))
    for busy in reversed(by_load):
        for idle in by_load:
            if idle == busy:
                break
            gap = load[busy] - load[idle]
            if gap < policy.min_gap or load[busy] < policy.ratio * load[idle]:
                continue
            after = {**count, busy: count[busy] - 1, idle: count[idle] + 1}
            if max(after.values()) - min(after.values()) > skew:
                continue
            fits = [
                (abs(gap - 2 * rate(s)), s)
                for s in on(busy)
                if rate(s) > 0 and abs(gap - 2 * rate(s)) <= (1 - policy.improvement) * gap
            ]
            if fits:
                return min(fits)[1], idle
    return None


class LoadMeter:
    """Rows/s published by one task over the last `window_s`; None until a whole window has
    passed since the task started (a half-measured set must not steer the balancer)."""

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._started = clock()
        self._samples: deque[tuple[float, int]] = deque()

    def rate(self, rows: int) -> float | None:
        now = self._clock()
        self._samples.append((now, rows))
        # Keep one sample at or before the window's start, to span the whole window.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()
        if now - self._started < self.window_s:
            return None
        first_t, first_rows = self._samples[0]
        if now - first_t <= 0:
            return None
        # Rounded: the node rewrites its znode when its status changes.
        return round((rows - first_rows) / (now - first_t), 0)
