"""W1 as protocol events, for benchmarks that bypass the database (codec, merger, apply path).

The values come from `rowbus.workloads.w1_row`, the one definition of W1's rows, and the table
schema matches `rowbus.workloads.W1_DDL` column for column.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.workloads import w1_row

W1_COLUMNS = (
    ColumnSchema(name="id", type="bigint", nullable=False),
    ColumnSchema(name="i", type="int"),
    ColumnSchema(name="b", type="bigint"),
    ColumnSchema(name="s", type="varchar", length=64, charset="utf8mb4"),
    ColumnSchema(name="d", type="decimal", precision=12, scale=2),
    ColumnSchema(name="t", type="datetime", fsp=6),
    ColumnSchema(name="f", type="double"),
    ColumnSchema(name="y", type="tinyint"),
    ColumnSchema(name="x", type="text", charset="utf8mb4"),
    ColumnSchema(name="dt", type="date"),
)


def w1_table(schema: str = "bench", table: str = "w1") -> TableSchema:
    return TableSchema(schema, table, W1_COLUMNS, ("id",))


def w1_transactions(
    source: str,
    rows: int,
    *,
    per_txn: int = 100,
    seed: int = 1,
    table: TableSchema | None = None,
    first_key: int = 1,
) -> Iterator[tuple[int, list[RowChange]]]:
    """(ts, rows) of W1 inserts in `per_txn`-row transactions, as a reader publishes them."""
    table = table or w1_table()
    rng = random.Random(seed)
    clock = HybridClock()
    position = 4
    for first in range(first_key, first_key + rows, per_txn):
        ts = clock.next(int(time.time() * 1000))
        n = min(per_txn, first_key + rows - first)
        gtid = f"0-1-{first}"
        txn: list[RowChange] = []
        for i in range(n):
            position += 350
            txn.append(
                RowChange(
                    source=source,
                    ts=ts,
                    op=Op.INSERT,
                    schema=table.schema,
                    table=table.table,
                    schema_id=table.schema_id,
                    primary_key=table.primary_key,
                    before=None,
                    after=w1_row(rng, first + i),
                    txn=TxnRef(gtid, i, n),
                    position=BinlogPosition("bin.000001", position, gtid),
                )
            )
        yield ts, txn


def w1_events(source: str, rows: int, **kwargs: object) -> list[RowChange]:
    """`rows` W1 inserts, flattened."""
    return [row for _ts, txn in w1_transactions(source, rows, **kwargs) for row in txn]  # type: ignore[arg-type]


def resolved(source: str, ts: int) -> Resolved:
    return Resolved(source=source, ts=ts)
