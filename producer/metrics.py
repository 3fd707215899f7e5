"""Counters a reader keeps for metrics (read by the CLI's status line or an exporter)."""

from __future__ import annotations

import resource
from collections import Counter
from dataclasses import dataclass, field

from rowbus.clients.prometheus import LatencyHistogram, Readings


@dataclass
class ReaderMetrics:
    events: int = 0
    """Binlog events read (any kind)."""
    transactions: int = 0
    rows: int = 0
    """Row events published."""
    bytes: int = 0
    """Encoded bytes published (values)."""
    batches: int = 0
    heartbeats: int = 0
    fragments: int = 0
    """Fragments of huge transactions published (PROTOCOL.md §9.1)."""
    lag_ms: int = 0
    """Wall clock minus the commit time of the last transaction read."""
    commit_latency_ms: list[float] = field(default_factory=list)
    """The latest Kafka commit latencies (flush + commit), newest last, at most 1000."""
    commit_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    watermark_ts: int = 0
    """The ts of the last Resolved or Heartbeat published."""
    stalled_partitions: int = 0
    """Partitions whose committed records read_committed consumers cannot read (stall.py)."""
    errors: Counter[str] = field(default_factory=Counter)
    """Terms ended by an error, by the error's type."""
    xa_prepared: int = 0
    """XA transactions prepared and not yet committed (each holds the checkpoint)."""
    xa_prepared_oldest_s: float = 0.0
    """How long the oldest of them has been prepared."""
    xa_prepared_age_s: dict[str, float] = field(default_factory=dict)
    """Per XID, how long it has been prepared: those past `xa_prepared_warn_s` only."""

    def observe_commit(self, ms: float) -> None:
        self.commit_latency.observe(ms / 1000)
        self.commit_latency_ms.append(ms)
        if len(self.commit_latency_ms) > 1000:
            del self.commit_latency_ms[:500]

    def readings(self) -> dict[str, float]:
        """The counters as read now (the reader's exit log, benchmarks)."""
        lat = sorted(self.commit_latency_ms)
        return {
            "events": self.events,
            "transactions": self.transactions,
            "rows": self.rows,
            "bytes": self.bytes,
            "batches": self.batches,
            "heartbeats": self.heartbeats,
            "fragments": self.fragments,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "lag_ms": self.lag_ms,
            "commit_latency_p50_ms": lat[len(lat) // 2] if lat else 0.0,
            "commit_latency_max_ms": lat[-1] if lat else 0.0,
            "xa_prepared": self.xa_prepared,
            "xa_prepared_oldest_s": self.xa_prepared_oldest_s,
        }

    def prometheus(self) -> Readings:
        """What the reader's process exports (`rowbus.clients.prometheus`)."""
        return {
            "events_total": self.events,
            "transactions_total": self.transactions,
            "rows_out_total": self.rows,
            "bytes_out_total": self.bytes,
            "batches_total": self.batches,
            "heartbeats_total": self.heartbeats,
            "fragments_total": self.fragments,
            "lag_ms": self.lag_ms,
            "watermark_ts": self.watermark_ts,
            "stalled_partitions": self.stalled_partitions,
            "commit_latency_seconds": self.commit_latency,
            "errors_total": dict(self.errors),
            "xa_prepared": self.xa_prepared,
            "xa_prepared_oldest_seconds": self.xa_prepared_oldest_s,
            "xa_prepared_age_seconds": dict(self.xa_prepared_age_s),
        }
