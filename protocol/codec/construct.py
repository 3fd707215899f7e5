"""Fast constructors for the hot records, for decoders only.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` and parses
keyword arguments, which costs more than the rest of decoding a row. Decoders build the
hottest records here instead: a bare instance whose slots are filled through their
descriptors, after the same checks ``__post_init__`` makes. The result is an ordinary, equal,
immutable dataclass instance.
"""

from __future__ import annotations

from typing import Any

from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef
from rowbus.protocol.values import Value

_new = object.__new__
_ROW_SETTERS = tuple(
    getattr(RowChange, f).__set__
    for f in (
        "source",
        "ts",
        "op",
        "schema",
        "table",
        "schema_id",
        "primary_key",
        "before",
        "after",
        "txn",
        "position",
    )
)
_TXN_SETTERS = tuple(getattr(TxnRef, f).__set__ for f in ("id", "index", "count"))
_POS_SETTERS = tuple(
    getattr(BinlogPosition, f).__set__ for f in ("file", "offset", "gtid", "upstream")
)
_INSERT = Op.INSERT
_DELETE = Op.DELETE
_READ = Op.READ


def row_change(
    source: str,
    ts: int,
    op: Op,
    schema: str,
    table: str,
    schema_id: int,
    primary_key: tuple[str, ...],
    before: tuple[Value, ...] | None,
    after: tuple[Value, ...] | None,
    txn: TxnRef,
    position: BinlogPosition,
) -> RowChange:
    """``RowChange(...)`` with the same checks; ProtocolError if the images do not fit `op`."""
    after_only = op is _INSERT or op is _READ  # a snapshot row (1.2) is shaped like an insert
    if (before is None) is (not after_only) or (after is None) is (op is not _DELETE):
        raise ProtocolError(
            f"{op.value} of {schema}.{table} at {position}: "
            "an insert has only after, a delete only before, an update both"
        )
    if before is not None and after is not None and len(before) != len(after):
        raise ProtocolError(
            f"update of {schema}.{table} at {position}: before has {len(before)} values, "
            f"after {len(after)}"
        )
    obj: Any = _new(RowChange)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10 = _ROW_SETTERS
    s0(obj, source)
    s1(obj, ts)
    s2(obj, op)
    s3(obj, schema)
    s4(obj, table)
    s5(obj, schema_id)
    s6(obj, primary_key)
    s7(obj, before)
    s8(obj, after)
    s9(obj, txn)
    s10(obj, position)
    return obj  # type: ignore[no-any-return]


def txn_ref(id_: str, index: int, count: int | None) -> TxnRef:
    """``TxnRef(id_, index, count)``."""
    obj: Any = _new(TxnRef)
    a, b, c = _TXN_SETTERS
    a(obj, id_)
    b(obj, index)
    c(obj, count)
    return obj  # type: ignore[no-any-return]


def binlog_position(file: str, offset: int, gtid: str | None, upstream: int = 0) -> BinlogPosition:
    """``BinlogPosition(file, offset, gtid, upstream)``."""
    obj: Any = _new(BinlogPosition)
    a, b, c, d = _POS_SETTERS
    a(obj, file)
    b(obj, offset)
    c(obj, gtid)
    d(obj, upstream)
    return obj  # type: ignore[no-any-return]
