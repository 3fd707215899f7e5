"""Read API of the apply job's progress, for tools outside the job (`rowbus status`, the demo).

The job keeps its checkpoint rows in the sink (``<state_database>.apply_checkpoint``, written by
`rowbus.spark_apply.sink`); this module is the one reader of them from outside the sink, so
the table layout stays the sink's private business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rowbus.clients.mysql import quote


@dataclass(frozen=True)
class AppliedBatch:
    """The last batch a job committed to the sink."""

    job: str
    batch_id: int
    watermark_ts: int
    committed_at: str
    rows: int


def last_applied(conn: Any, state_database: str, job: str) -> AppliedBatch | None:
    """The job's last committed batch, read on a pymysql connection to the sink; None when the
    job never committed (or its state database does not exist yet)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME='apply_checkpoint'",
            (state_database,),
        )
        row = cur.fetchone()
        if not row or not row[0]:
            return None
        cur.execute(
            "SELECT batch_id, MAX(watermark), MAX(committed_at), SUM(row_count) FROM "
            f"{quote(state_database)}.apply_checkpoint WHERE job=%s GROUP BY batch_id "
            "ORDER BY batch_id DESC LIMIT 1",
            (job,),
        )
        last = cur.fetchone()
    if last is None:
        return None
    return AppliedBatch(job, int(last[0]), int(last[1]), str(last[2]), int(last[3]))
