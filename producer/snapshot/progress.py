"""Snapshot progress: rows, rows/s and ETA per table, logged every few seconds (the terminal
shows them through the CLI's logging) and kept for `rowbus status` in the checkpoint."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rowbus.producer.snapshot.state import SnapshotState, TableProgress

log = logging.getLogger(__name__)


def eta_s(table: TableProgress, rate: float) -> float | None:
    """Seconds left for `table` at `rate` rows/s (None when unknown)."""
    if table.done:
        return 0.0
    if rate <= 0 or table.estimate <= 0:
        return None
    return max(0.0, (table.estimate - table.rows) / rate)


def describe(table: TableProgress, rate: float) -> str:
    """``db.t 12,000/50,000 rows (24%) 40,000 rows/s ETA 1s``."""
    total = max(table.estimate, table.rows)
    pct = f" ({100 * table.rows // total}%)" if total and not table.done else ""
    eta = eta_s(table, rate)
    tail = "done" if table.done else (f"ETA {eta:.0f}s" if eta is not None else "ETA ?")
    return f"{table.name} {table.rows:,}/{total:,} rows{pct} {rate:,.0f} rows/s {tail}"


@dataclass
class Progress:
    """Rates since this run of the snapshot started (a resumed snapshot counts afresh)."""

    state: SnapshotState
    every_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    _base: dict[str, int] = field(default_factory=dict)
    _last_log: float = 0.0

    def __post_init__(self) -> None:
        self.started = self._last_log = self.clock()
        self._base = {n: t.rows for n, t in self.state.tables.items()}

    def rate(self, table: TableProgress | None = None) -> float:
        elapsed = max(1e-6, self.clock() - self.started)
        if table is not None:
            return (table.rows - self._base.get(table.name, 0)) / elapsed
        total = sum(t.rows - self._base.get(n, 0) for n, t in self.state.tables.items())
        return total / elapsed

    def tick(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._last_log < self.every_s:
            return
        self._last_log = now
        active = [t for t in self.state.tables.values() if not t.done and t.rows]
        total = sum(t.rows for t in self.state.tables.values())
        left = sum(1 for t in self.state.tables.values() if not t.done)
        log.info(
            "snapshot: %s rows, %s rows/s, %d of %d tables left%s",
            f"{total:,}",
            f"{self.rate():,.0f}",
            left,
            len(self.state.tables),
            "".join(f"; {describe(t, self.rate(t))}" for t in active[:8]),
        )


def summary(state: SnapshotState, now: float) -> dict[str, object]:
    """What `rowbus status` shows of a snapshot, from the checkpoint alone: rows, the average
    rows/s since it began (wall clock, restarts included), and an ETA per table."""
    end = state.finished if state.finished is not None else now
    elapsed = max(1e-3, end - state.started) if state.started else 0.0
    rate = state.seq / elapsed if elapsed else 0.0
    tables = []
    for t in state.tables.values():
        eta = eta_s(t, rate)
        tables.append(
            {
                "table": t.name,
                "rows": t.rows,
                "estimate": t.estimate,
                "done": t.done,
                "eta_s": None if eta is None else round(eta, 1),
            }
        )
    return {
        "done": state.done,
        "rows": state.seq,
        "rows_per_s": round(rate, 1),
        "restarts": state.restarts,
        "position": str(state.position),
        "tables_done": sum(1 for t in state.tables.values() if t.done),
        "tables": tables,
        "incremental": [
            {"table": b.name, "rows": b.rows, "chunks": b.chunks, "done": b.done}
            | ({"refused": b.refused} if b.refused else {})
            for b in state.backfills.values()
        ],
    }


def status_line(info: dict[str, object]) -> str:
    """One line of `rowbus status` for a snapshot."""
    tables = info["tables"]
    assert isinstance(tables, list)
    state = "done" if info["done"] else "running"
    line = (
        f"snapshot {state}: {info['rows']:,} rows, {info['rows_per_s']:,.0f} rows/s, "
        f"{info['tables_done']}/{len(tables)} tables"
    )
    if not info["done"]:
        busy = [t for t in tables if not t["done"]][:4]
        line += "".join(
            f"; {t['table']} {t['rows']:,}/{max(t['rows'], t['estimate']):,} "
            + (f"ETA {t['eta_s']:.0f}s" if t["eta_s"] is not None else "ETA ?")
            for t in busy
        )
    incremental = info.get("incremental") or []
    assert isinstance(incremental, list)
    running = [b for b in incremental if not b["done"]]
    refused = [b for b in incremental if b.get("refused")]
    if running or refused:
        line += f"; incremental: {len(running)} table(s) running" + "".join(
            f", {b['table']} {b['rows']:,} rows" for b in running[:4]
        )
        line += "".join(f"; {b['table']} refused: {b['refused']}" for b in refused[:4])
    return line
