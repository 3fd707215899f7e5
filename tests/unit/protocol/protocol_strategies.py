"""Hypothesis strategies for every value type and every record kind (shared by the tests)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    ControlKind,
    ControlRecord,
    DdlChange,
    Heartbeat,
    IndexSchema,
    Op,
    ReaderCheckpoint,
    Resolved,
    RowChange,
    SchemaRecord,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.values import TIME_MAX_US, ZeroDate

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ts = st.integers(0, 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)

decimals = st.one_of(
    st.builds(
        lambda i, s: Decimal(i).scaleb(-s),
        st.integers(-(10**65) + 1, 10**65 - 1),
        st.integers(0, 30),
    ),
    st.decimals(allow_nan=False, allow_infinity=False),
)
zero_dates = st.builds(  # a zero month or day makes any date a zero date
    lambda y, md, time, frac: ZeroDate(
        f"{y:04d}-{md[0]:02d}-{md[1]:02d}" + (f" {time}{frac}" if time else "")
    ),
    st.sampled_from([0, 1, 2024, 9999]),
    st.sampled_from([(0, 0), (0, 15), (12, 0), (0, 31)]),
    st.sampled_from(["", "00:00:00", "23:59:59"]),
    st.sampled_from(["", ".0", ".000", ".000000", ".123456"]),
)
values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-(2**63), 2**63 - 1, 2**63, 2**64 - 1, 0, -1, 1901, 2155]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    decimals,
    text,
    st.binary(max_size=20),
    st.dates(),
    st.datetimes(),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.integers(-TIME_MAX_US, TIME_MAX_US).map(lambda us: dt.timedelta(microseconds=us)),
    st.frozensets(text, max_size=4),
    zero_dates,
)
images = st.lists(values, min_size=1, max_size=12).map(tuple)
positions = st.builds(BinlogPosition, names, st.integers(0, 2**63 - 1), st.none() | names)
txns = st.builds(TxnRef, names, u32, st.none() | u32)


@st.composite
def rows(draw: Any) -> RowChange:
    op = draw(st.sampled_from(Op))
    width = draw(st.integers(1, 10))
    img = st.lists(values, min_size=width, max_size=width).map(tuple)
    return RowChange(
        source=draw(names),
        ts=draw(ts),
        op=op,
        schema=draw(names),
        table=draw(names),
        schema_id=draw(ts),
        primary_key=tuple(draw(st.lists(names, max_size=3))),
        before=None if op in (Op.INSERT, Op.READ) else draw(img),
        after=None if op is Op.DELETE else draw(img),
        txn=draw(txns),
        position=draw(positions),
    )


columns = st.builds(
    ColumnSchema,
    name=names,
    type=st.sampled_from(["bigint", "varchar", "decimal", "datetime", "set", "json", "bit"]),
    unsigned=st.booleans(),
    nullable=st.booleans(),
    length=st.none() | u32,
    precision=st.none() | st.integers(1, 65),
    scale=st.none() | st.integers(0, 30),
    fsp=st.none() | st.integers(0, 6),
    charset=st.none() | st.sampled_from(["utf8mb4", "binary", "latin1"]),
    elements=st.lists(text, max_size=3).map(tuple),
    default=st.none() | st.sampled_from(["NULL", "7", "'it''s'", "current_timestamp(6)"]) | text,
    collation=st.none() | st.sampled_from(["utf8mb4_bin", "latin1_swedish_ci"]),
)


@st.composite
def tables(draw: Any) -> TableSchema:
    cols = draw(st.lists(columns, min_size=1, max_size=5, unique_by=lambda c: c.name))
    pk = draw(st.lists(st.sampled_from([c.name for c in cols]), unique=True, max_size=2))
    col_names = st.lists(st.sampled_from([c.name for c in cols]), min_size=1, max_size=3)
    indexes = draw(
        st.lists(st.builds(IndexSchema, names, col_names.map(tuple), st.booleans()), max_size=2)
    )
    return TableSchema(draw(names), draw(names), tuple(cols), tuple(pk), tuple(indexes))


ddls = st.builds(
    DdlChange,
    source=names,
    ts=ts,
    schema=names,
    table=st.none() | names,
    statement=text,
    table_schema=st.none() | tables(),
    position=positions,
    txn=st.none() | txns,
    kind=st.none() | st.sampled_from(DdlKind),
)
resolveds = st.builds(Resolved, source=names, ts=ts)
heartbeats = st.builds(
    Heartbeat, source=names, ts=ts, reader_id=names, position=positions, lag_ms=i64
)
schema_records = st.builds(SchemaRecord.of, tables(), names, ts)
checkpoints = st.builds(
    ReaderCheckpoint,
    source=names,
    position=positions,
    gtid_set=st.none() | text,
    ts=ts,
    offsets=st.lists(st.tuples(names, st.integers(0, 2**31 - 1), i64), max_size=3).map(tuple),
    reader_id=names,
    epoch=i64,
)
controls = st.builds(
    ControlRecord,
    lock_id=names,
    kind=st.sampled_from(ControlKind),
    shard=st.none() | names,
    statement=st.none() | text,
    ts=ts,
    actor=names,
    detail=text,
)
records = st.one_of(rows(), ddls, resolveds, heartbeats, schema_records, checkpoints, controls)


def strict(obj: Any) -> Any:
    """A form of `obj` that tells apart what == does not: 1.0 from 1.00, -0.0 from 0.0, and a
    naive from an aware datetime."""
    if isinstance(obj, tuple | list):
        return (type(obj).__name__, [strict(x) for x in obj])
    if isinstance(obj, frozenset):
        return ("frozenset", sorted(obj))
    if hasattr(obj, "__dataclass_fields__"):
        return (
            type(obj).__name__,
            {f: strict(getattr(obj, f)) for f in obj.__dataclass_fields__},
        )
    if isinstance(obj, dt.datetime):  # fold means nothing to MySQL and is not carried
        obj = obj.replace(fold=0)
    return (type(obj).__name__, repr(obj))
