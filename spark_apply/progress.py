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
    found = [b for b in every_job(conn, state_database) if b.job == job]
    return found[0] if found else None


def every_job(conn: Any, state_database: str) -> list[AppliedBatch]:
    """The last committed batch of every job that keeps its state in `state_database`."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME='apply_checkpoint'",
            (state_database,),
        )
        row = cur.fetchone()
        if not row or not row[0]:
            return []
        db = quote(state_database)
        cur.execute(
            "SELECT c.job, c.batch_id, MAX(c.watermark), MAX(c.committed_at), SUM(c.row_count) "
            f"FROM {db}.apply_checkpoint c JOIN (SELECT job, MAX(batch_id) AS batch_id FROM "
            f"{db}.apply_checkpoint GROUP BY job) last USING (job, batch_id) "
            "GROUP BY c.job, c.batch_id ORDER BY c.job"
        )
        rows = cur.fetchall()
    return [AppliedBatch(str(r[0]), int(r[1]), int(r[2]), str(r[3]), int(r[4])) for r in rows]
