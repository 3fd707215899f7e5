"""Counters of the apply job's driver, exported by its process (`rowbus.clients.prometheus`)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rowbus.clients.prometheus import LatencyHistogram, Readings
from rowbus.protocol.hlc import physical_ms


@dataclass
class ApplyMetrics:
    batches: int = 0
    records_in: int = 0
    """Kafka records the job read (rows, DDL, watermarks), held rows read again included."""
    bytes_in: int = 0
    """Their values' bytes: over the bytes of the rows applied, what a long hold costs in
    reads (`benchmarks.bounded`)."""
    rows_applied: int = 0
    watermark_ts: int = 0
    """The bound released up to (the merged watermark) by the last batch."""
    stash_events: int = 0
    """Events held for a later batch (not yet resolved, or held by shard DDL)."""
    split_transactions: int = 0
    """Transactions split by a shard-DDL hold: part applied, part waiting for the lock."""
    stuck_locks: int = 0
    """Shard-DDL locks waiting longer than ``apply.shard_ddl.wedge_report_s`` (reported)."""
    lanes: dict[str, int] = field(default_factory=dict)
    """Watermark per lane (``topic[partition]/source``)."""
    apply_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: Counter[str] = field(default_factory=Counter)
    owned_batches: int = 0
    """Throughput mode: batches written by executor tasks."""
    fallbacks: Counter[str] = field(default_factory=Counter)
    """Throughput mode: batches the merger planned on the driver, by reason."""

    def read(self, table: Any) -> None:
        """Counts an Arrow batch of `source.SCHEMA` read from Kafka."""
        import pyarrow.compute as pc

        self.records_in += table.num_rows
        self.bytes_in += int(pc.sum(pc.binary_length(table.column("value"))).as_py() or 0)

    def prometheus(self) -> Readings:
        lag = max(0, int(time.time() * 1000) - physical_ms(self.watermark_ts))
        return {
            "batches_total": self.batches,
            "records_in_total": self.records_in,
            "bytes_in_total": self.bytes_in,
            "rows_applied_total": self.rows_applied,
            "watermark_ts": self.watermark_ts,
            "lag_ms": lag if self.watermark_ts else 0,
            "stash_events": self.stash_events,
            "split_transactions_total": self.split_transactions,
            "stuck_locks": self.stuck_locks,
            "lane_watermark_ts": dict(self.lanes),
            "apply_latency_seconds": self.apply_latency,
            "errors_total": dict(self.errors),
            "owned_batches_total": self.owned_batches,
            "driver_fallbacks_total": dict(self.fallbacks),
        }
