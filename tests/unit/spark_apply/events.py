"""Small builders of protocol events for the apply job's tests."""

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


def table(
    schema: str = "db", name: str = "t", columns: tuple[str, ...] = ("id", "v")
) -> TableSchema:
    cols = tuple(
        ColumnSchema(name=c, type="bigint" if c == "id" else "varchar", nullable=c != "id")
        for c in columns
    )
    return TableSchema(schema, name, cols, ("id",))


def row(
    ts: int,
    op: Op,
    before: tuple[Value, ...] | None = None,
    after: tuple[Value, ...] | None = None,
    *,
    source: str = "s1",
    tbl: TableSchema | None = None,
    index: int = 0,
    count: int | None = 1,
    txn: str | None = None,
) -> RowChange:
    tbl = tbl or table()
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
        txn=TxnRef(txn or f"{source}-{ts}", index, count),
        position=BinlogPosition("bin.000001", ts * 10 + index),
    )


def ddl(ts: int, statement: str, tbl: TableSchema, *, source: str = "s1") -> DdlChange:
    return DdlChange(
        source=source,
        ts=ts,
        schema=tbl.schema,
        table=tbl.table,
        statement=statement,
        table_schema=tbl,
        position=BinlogPosition("bin.000001", ts * 10),
    )


def resolved(ts: int, source: str = "s1") -> Resolved:
    return Resolved(source=source, ts=ts)
