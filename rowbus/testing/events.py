"""Builders of protocol events for tests: a table, a row change, a DDL, a watermark.

Defaults make a valid event from very little (``row(ts, Op.INSERT, after=(1, "a"))``); every
field a test cares about can be given.
"""

from __future__ import annotations

from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    DdlChange,
    Op,
    Resolved,
    RowChange,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.values import Value

BINLOG = "bin.000001"


def table(
    schema: str = "db",
    name: str = "t",
    columns: tuple[str, ...] = ("id", "v"),
    key: tuple[str, ...] = ("id",),
) -> TableSchema:
    """A table whose key columns are BIGINT NOT NULL and the others nullable VARCHARs."""
    cols = tuple(
        ColumnSchema(name=c, type="bigint" if c in key else "varchar", nullable=c not in key)
        for c in columns
    )
    return TableSchema(schema, name, cols, key)


def row(
    ts: int,
    op: Op = Op.INSERT,
    before: tuple[Value, ...] | None = None,
    after: tuple[Value, ...] | None = None,
    *,
    source: str = "s1",
    tbl: TableSchema | None = None,
    index: int = 0,
    count: int | None = 1,
    txn: str | None = None,
    position: BinlogPosition | None = None,
) -> RowChange:
    """A row change of `tbl` at `ts`; its binlog offset grows with ts and index by default."""
    tbl = tbl or table()
    txn_id = txn or f"{source}-{ts}"
    return RowChange(
        source=source,
        ts=ts,
        op=op,
        schema=tbl.schema,
        table=tbl.table,
        schema_id=tbl.schema_id,
        primary_key=tbl.primary_key,
        before=before,
        after=after,
        txn=TxnRef(txn_id, index, count),
        position=position or BinlogPosition(BINLOG, ts * 10 + index),
    )


def ddl(
    ts: int,
    statement: str,
    tbl: TableSchema | None = None,
    *,
    source: str = "s1",
    position: BinlogPosition | None = None,
) -> DdlChange:
    """A DDL of `tbl` at `ts`, carrying `tbl` as its after-schema."""
    tbl = tbl or table()
    return DdlChange(
        source=source,
        ts=ts,
        schema=tbl.schema,
        table=tbl.table,
        statement=statement,
        table_schema=tbl,
        position=position or BinlogPosition(BINLOG, ts * 10),
    )


def resolved(ts: int, source: str = "s1") -> Resolved:
    return Resolved(source=source, ts=ts)
