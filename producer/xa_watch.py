"""Prepared XA transactions that stay prepared: say so, once, and export how long.

While an XA transaction is prepared and not committed, every checkpoint a reader writes resumes
before its group (PROTOCOL.md §9.2), so a forgotten ``XA PREPARE`` (a crashed transaction
manager) silently holds the source's checkpoint — and the binlog it needs — for good. The
reader asks `PreparedXaWatch.check` about once a second: each XID held longer than the
threshold is named in one warning (its binlog position and how long), and the metrics carry
the number held, the oldest's age and the age of each one past the threshold.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from rowbus.producer.assembler import PreparedXa
from rowbus.producer.metrics import ReaderMetrics

log = logging.getLogger(__name__)


class PreparedXaWatch:
    """Warns once per XID prepared longer than `threshold_s`; keeps `metrics` up to date."""

    def __init__(self, source: str, threshold_s: float, metrics: ReaderMetrics) -> None:
        self.source = source
        self.threshold_s = threshold_s
        self.metrics = metrics
        self._warned: set[str] = set()

    def check(self, held: Sequence[PreparedXa], now: float) -> list[PreparedXa]:
        """Update the metrics for `held` at wall time `now`; returns those past the threshold
        (warned about now or before)."""
        m = self.metrics
        ages = {x.xid: max(0.0, now - x.timestamp) for x in held}
        late = [x for x in held if ages[x.xid] >= self.threshold_s]
        # The warnings first: whoever sees an XID in the metrics finds it already named.
        for x in late:
            if x.xid not in self._warned:
                self._warned.add(x.xid)
                log.warning(
                    "source %s: XA transaction %s has been prepared for %.0fs (binlog %s, "
                    "checkpoints held at %s since): nothing after it can be checkpointed past "
                    "it until it is committed or rolled back (XA COMMIT / XA ROLLBACK %s)",
                    self.source,
                    x.xid,
                    ages[x.xid],
                    x.prepared_at,
                    x.hold,
                    x.xid,
                )
        self._warned &= set(ages)  # an XID that ended may come back (and be named) again
        m.xa_prepared = len(held)
        m.xa_prepared_oldest_s = max(ages.values(), default=0.0)
        m.xa_prepared_age_s = {x.xid: ages[x.xid] for x in late}
        return late
