"""The reader's fast path: a rows event's body decoded by the native `rowbus.producer._rows`.

mysql-replication decodes a row column by column in Python (a method call, a packet read and a
struct unpack per value: most of the reader's time on wide rows). Here a table's columns are
turned once, when its table map is first seen, into a *plan*: per column a small tuple saying
how to read it. The native decoder then reads every row of an event from the event's bytes in
one call. It yields exactly the values the pure path does (mysql-replication plus
`rowbus.producer.values`); `tests/integration/producer/test_fastpath.py` compares both on the
whole fidelity corpus and on generated values.

The pure path stays the fallback: for a table with a column type the plan does not cover
(`plan_for` answers None: JSON, GEOMETRY, the pre-5.6 DATETIME/TIME/TIMESTAMP), when the native
module is not built (no C compiler at install), and for a single event the native decoder
cannot read as the pure path would (it answers None; the pure path then decodes, or raises,
as it always did).
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from rowbus.producer.values import charset_of, text_decoder
from rowbus.protocol.codec import (
    ENCODING_HEADER,
    KIND_HEADER,
    KIND_NAMES,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    Encoding,
)
from rowbus.protocol.codec.fastpath import split
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import BinlogPosition, Op, RowChange
from rowbus.protocol.partition import encode_key
from rowbus.protocol.values import INT64_MIN, UINT64_MAX, Value, ZeroDate

log = logging.getLogger(__name__)

OutRecord = tuple[str, int | None, bytes | None, bytes, list[tuple[str, bytes]]]
"""(topic, partition or None for the client's partitioner, key, value, headers)."""

try:
    from rowbus.producer import _rows  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - an install without a C compiler
    _rows = None
    log.info("rowbus.producer._rows is not built: rows are decoded in pure Python")
else:
    _rows.configure(Decimal, ZeroDate, zlib.crc32)

AVAILABLE = _rows is not None
"""Whether the native decoder is built (and enabled: `set_native`)."""
_BUILT = _rows


def set_native(enabled: bool) -> None:
    """Turn the native paths on or off for readers created afterwards (benchmarks compare the
    two; a reader never needs this)."""
    global _rows, AVAILABLE  # noqa: PLW0603 - a process-wide switch, set before any reader
    _rows = _BUILT if enabled else None
    AVAILABLE = _rows is not None


Plan = tuple[tuple[int, int, int, Any], ...]
"""Per column: (kind, a, b, obj), as `_rows.c` reads them."""

# Kinds, as `enum Kind` in _rows.c.
SINT, UINT, FLOAT, DOUBLE, DECIMAL, BYTES, UTF8, TEXT = range(8)
DATE, DATETIME2, TIMESTAMP2, TIME2, YEAR, SET, BIT, ENUM = range(8, 16)

_INT_BYTES = {
    FIELD_TYPE.TINY: 1,
    FIELD_TYPE.SHORT: 2,
    FIELD_TYPE.INT24: 3,
    FIELD_TYPE.LONG: 4,
    FIELD_TYPE.LONGLONG: 8,
}
_UTF8 = frozenset({"utf8mb4", "utf8mb3", "utf8"})
_TWO_BYTE_LENGTH = 255  # as rowbus.producer.values: CHAR/VARCHAR over 255 bytes, 2 length bytes
_MAX_DECIMAL_DIGITS = 65


class Counts:
    """Rows events read natively and left to the pure path, since start (for tests and
    benchmarks; plain ints, one reader thread per process decodes)."""

    native = 0
    fallback = 0


def _string(column: Any, length_size: int, pad_to: int) -> tuple[int, int, int, Any]:
    charset = charset_of(column)
    if charset is None or charset == "binary":
        return (BYTES, length_size, pad_to, None)
    if charset in _UTF8:
        return (UTF8, length_size, 0, None)
    return (TEXT, length_size, 0, text_decoder(charset))


def _column(column: Any) -> tuple[int, int, int, Any] | None:
    t = column.type
    size = _INT_BYTES.get(t)
    if size is not None:
        return (UINT if column.unsigned else SINT, size, 0, None)
    fsp = getattr(column, "fsp", 0) or 0
    match t:
        case FIELD_TYPE.FLOAT:
            return (FLOAT, 0, 0, None)
        case FIELD_TYPE.DOUBLE:
            return (DOUBLE, 0, 0, None)
        case FIELD_TYPE.NEWDECIMAL:
            if not 0 < column.precision <= _MAX_DECIMAL_DIGITS:
                return None
            return (DECIMAL, column.precision, column.decimals, None)
        case FIELD_TYPE.VARCHAR | FIELD_TYPE.VAR_STRING:
            return _string(column, 2 if column.max_length > _TWO_BYTE_LENGTH else 1, 0)
        case FIELD_TYPE.STRING:
            size = 2 if column.max_length > _TWO_BYTE_LENGTH else 1
            return _string(column, size, column.max_length)
        case FIELD_TYPE.BLOB:
            return _string(column, column.length_size, 0)
        case FIELD_TYPE.DATE | FIELD_TYPE.NEWDATE:
            return (DATE, 0, 0, None)
        case FIELD_TYPE.DATETIME2:
            return (DATETIME2, fsp, 0, None)
        case FIELD_TYPE.TIMESTAMP2:
            return (TIMESTAMP2, fsp, 0, None)
        case FIELD_TYPE.TIME2:
            return (TIME2, fsp, 0, None)
        case FIELD_TYPE.YEAR:
            return (YEAR, 0, 0, None)
        case FIELD_TYPE.SET:
            return (SET, column.size, 0, tuple(column.set_values or ()))
        case FIELD_TYPE.BIT:
            return (BIT, column.bytes, 0, None) if 0 < column.bytes <= 8 else None
        case FIELD_TYPE.ENUM:
            values = column.enum_values
            return (ENUM, column.size, 0, tuple(values) if values else None)
    return None


def plan_for(columns: list[Any]) -> Plan | None:
    """The native decoder's plan for a table map's columns; None when the native decoder is
    not built or a column's type is not covered (the table then takes the pure path)."""
    if _rows is None:
        return None
    plan = []
    for column in columns:
        spec = _column(column)
        if spec is None:
            return None
        plan.append(spec)
    return tuple(plan)


def decode(event: Any, mode: int, plan: Plan) -> list[tuple[Any, Any]] | None:
    """Every row of a parsed (rows not yet read) mysql-replication rows event, as (before,
    after) images; None when the native decoder leaves this event to the pure path."""
    wrapper = event.packet
    raw = wrapper.packet
    if (
        not event.complete
        or event.number_of_columns != len(plan)
        or wrapper._BinLogPacketWrapper__data_buffer
    ):
        Counts.fallback += 1
        return None
    start = raw._position
    end = start + event.event_size - wrapper.read_bytes
    second = event.columns_present_bitmap2 if mode == 2 else None
    rows: list[tuple[Any, Any]] | None = _rows.decode(
        raw._data,
        start,
        end,
        mode,
        len(plan),
        event.columns_present_bitmap,
        second,
        plan,
    )
    if rows is None:
        Counts.fallback += 1
    else:
        Counts.native += 1
    return rows


def decode_body(
    data: bytes,
    start: int,
    end: int,
    mode: int,
    plan: Plan,
    present: bytes,
    present_after: bytes | None,
) -> list[tuple[Any, Any]] | None:
    """`decode` for a rows event framed by `rowbus.producer.dumpframes`: the rows are
    ``data[start:end]``; the caller has read the event's post-header (column count, bitmaps)."""
    rows: list[tuple[Any, Any]] | None = _rows.decode(
        data, start, end, mode, len(plan), present, present_after, plan
    )
    if rows is None:
        Counts.fallback += 1
    else:
        Counts.native += 1
    return rows


# ---- records ---------------------------------------------------------------------------------

_OP_NUMBERS = {Op.INSERT: 1, Op.UPDATE: 2, Op.DELETE: 3, Op.READ: 4}  # rowbus.proto's enum Op
_trailer = struct.Struct("<BI").pack
_crc32 = zlib.crc32
ROW_HEADERS = (
    (VERSION_HEADER, PROTOCOL_VERSION.encode()),
    (ENCODING_HEADER, Encoding.PROTOBUF.value.encode()),
    (KIND_HEADER, KIND_NAMES[RowChange].encode()),
)
"""The headers `rowbus.protocol.codec.encode` sends with a protobuf RowChange."""
ROW_HEADER_LIST = list(ROW_HEADERS)
"""`ROW_HEADERS` as the producer takes them: one list shared by every row record (nothing
changes a record's headers once built)."""


def change_value(
    source: str,
    ts: int,
    op: Op,
    schema: str,
    table: str,
    schema_id: int,
    primary_key: tuple[str, ...],
    before: tuple[Value, ...] | None,
    after: tuple[Value, ...] | None,
    txn_id: str,
    index: int,
    count: int | None,
    position: BinlogPosition,
) -> bytes | None:
    """The protobuf value of this RowChange, byte for byte what `rowbus.protocol.codec.encode`
    gives (without building the record, its `TxnRef` or a protobuf message: the transaction
    reference comes in its three parts); None when the native encoder is not built or cannot
    vouch for a value (the caller then encodes the record the usual way, which also raises the
    usual errors)."""
    if _rows is None or position.upstream:
        # The native encoder writes no position.upstream (protocol 1.2, after a switch to
        # another server): the usual encoding does.
        return None
    try:
        found: bytes | None = _rows.row_change(
            source,
            ts,
            _OP_NUMBERS[op],
            schema,
            table,
            schema_id,
            primary_key,
            before,
            after,
            txn_id,
            index,
            count,
            position.file,
            position.offset,
            position.gtid,
            True,
        )
        if found is not None:
            return found + _trailer(0x7D, _crc32(found))
        # A value the native split does not cover (SET, ZeroDate, ...): split in Python.
        body: bytes = _rows.row_change(
            source,
            ts,
            _OP_NUMBERS[op],
            schema,
            table,
            schema_id,
            primary_key,
            None if before is None else split(before),
            None if after is None else split(after),
            txn_id,
            index,
            count,
            position.file,
            position.offset,
            position.gtid,
        )
    except (ProtocolError, ValueError, TypeError, OverflowError):
        return None
    return body + _trailer(0x7D, _crc32(body))


def read_rows(
    source: str,
    ts: int,
    schema: str,
    table: str,
    schema_id: int,
    primary_key: tuple[str, ...],
    txn_id: str,
    position: BinlogPosition,
) -> Callable[[tuple[Value, ...], int], bytes | None]:
    """`change_value` of snapshot rows (`Op.READ`, after image only) of one chunk: what is the
    same for every row bound once, so a row costs one native call (PROTOCOL.md §9.5)."""
    assert _rows is not None
    assert not position.upstream
    native = _rows.row_change
    read = _OP_NUMBERS[Op.READ]
    file, offset, gtid = position.file, position.offset, position.gtid

    def value(after: tuple[Value, ...], index: int) -> bytes | None:
        try:
            found: bytes | None = native(
                source, ts, read, schema, table, schema_id, primary_key, None, after,
                txn_id, index, None, file, offset, gtid, True,
            )  # fmt: skip
        except (ProtocolError, ValueError, TypeError, OverflowError):
            found = None
        if found is not None:
            return found + _trailer(0x7D, _crc32(found))
        return change_value(
            source, ts, Op.READ, schema, table, schema_id, primary_key, None, after,
            txn_id, index, None, position,
        )  # fmt: skip

    return value


OP_NUMBERS = _OP_NUMBERS


def record_builder() -> Callable[..., OutRecord | None] | None:
    """The native `row_record` (a row's whole record in one call: key, partition, value with
    its trailer), or None when the native module is not built or turned off."""
    return None if _rows is None else _rows.row_record


def packet_splitter() -> Callable[[bytes, int], tuple[list[bytes], int]] | None:
    """The native `split_packets` (`rowbus.producer.dumpframes`), None when not built; framing
    does not depend on `set_native`, it gives the same payloads either way."""
    return None if _BUILT is None else _BUILT.split_packets


def partition(key: bytes, num_partitions: int) -> int:
    """`rowbus.protocol.partition.java_partition`, natively."""
    h: int = _rows.murmur2(key)
    return (h & 0x7FFFFFFF) % num_partitions


def key_prefix(schema: str, table: str) -> bytes:
    """The start of every message key of `schema.table` (`int_key`), computed once a table."""
    return encode_key(schema, table)[:-1] + b","


def key_maker(
    prefix: bytes, indexes: tuple[int, ...]
) -> Callable[[tuple[Value, ...]], bytes | None]:
    """`int_key` of one table's rows; a one-column key (the common case) formatted at once."""
    if len(indexes) != 1:
        return lambda image: int_key(prefix, image, indexes)
    (at,) = indexes

    def one(image: tuple[Value, ...]) -> bytes | None:
        v = image[at]
        if type(v) is not int or not INT64_MIN <= v <= UINT64_MAX:
            return None
        return b"%s%d]" % (prefix, v)

    return one


def int_key(prefix: bytes, image: tuple[Value, ...], indexes: tuple[int, ...]) -> bytes | None:
    """`rowbus.protocol.partition.encode_key` for a key of integers (JSON writes them as
    `str` does), without building a JSON document; None for any other key."""
    parts = []
    for i in indexes:
        v = image[i]
        if type(v) is not int or not INT64_MIN <= v <= UINT64_MAX:
            return None
        parts.append(str(v))
    return prefix + ",".join(parts).encode() + b"]"
