"""The native record encoder and hash (`rowbus.producer.fastrows`) against the protocol's own:
the same bytes, headers and partitions for any RowChange (hypothesis) and for the edges of
proto3's field presence (empty strings, zeros, an explicit count or GTID of zero/empty)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.producer import fastrows
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef
from rowbus.protocol.partition import encode_key, java_partition
from tests.unit.protocol.protocol_strategies import rows


def _native(row: RowChange) -> bytes | None:
    return fastrows.change_value(
        row.source,
        row.ts,
        row.op,
        row.schema,
        row.table,
        row.schema_id,
        row.primary_key,
        row.before,
        row.after,
        row.txn.id,
        row.txn.index,
        row.txn.count,
        row.position,
    )


def _same_as_protocol(row: RowChange) -> None:
    value, headers = encode(row, Encoding.PROTOBUF)
    assert _native(row) == value
    assert list(fastrows.ROW_HEADERS) == headers


def test_the_native_encoder_is_built() -> None:
    assert fastrows.AVAILABLE


@settings(derandomize=True, max_examples=400, deadline=None)
@given(row=rows())
def test_native_row_values_are_the_protocol_encoding(row: RowChange) -> None:
    _same_as_protocol(row)


def test_defaults_and_explicit_presence_encode_as_the_protocol_does() -> None:
    for count, gtid in ((None, None), (0, ""), (7, "0-1-2")):
        for op, before, after in (
            (Op.INSERT, None, (1, "")),
            (Op.DELETE, (None, b""), None),
            (Op.UPDATE, (0,), (2**64 - 1,)),
        ):
            _same_as_protocol(
                RowChange(
                    source="",
                    ts=0,
                    op=op,
                    schema="",
                    table="",
                    schema_id=0,
                    primary_key=("", "id"),
                    before=before,
                    after=after,
                    txn=TxnRef("", 0, count),
                    position=BinlogPosition("", 0, gtid),
                )
            )


def test_a_value_the_protocol_refuses_is_left_to_it() -> None:
    # A lone surrogate: the protocol raises its ProtocolError; the native path steps aside.
    row = RowChange(
        source="s",
        ts=1,
        op=Op.INSERT,
        schema="d",
        table="t",
        schema_id=1,
        primary_key=("id",),
        before=None,
        after=("\ud800",),
        txn=TxnRef("t", 0, 1),
        position=BinlogPosition("binlog.000001", 4),
    )
    assert _native(row) is None


@settings(derandomize=True, max_examples=400, deadline=None)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 1000))
def test_native_partitions_are_kafkas(key: bytes, partitions: int) -> None:
    assert fastrows.partition(key, partitions) == java_partition(key, partitions)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    schema=st.text(max_size=8),
    table=st.text(max_size=8),
    key=st.lists(
        st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4) | st.none(), min_size=1, max_size=3
    ),
)
def test_integer_keys_are_the_protocol_keys(schema: str, table: str, key: list[object]) -> None:
    indexes = tuple(range(len(key)))
    native = fastrows.int_key(fastrows.key_prefix(schema, table), tuple(key), indexes)  # type: ignore[arg-type]
    if all(type(v) is int for v in key):
        assert native == encode_key(schema, table, key)  # type: ignore[arg-type]
    else:
        assert native is None


def test_a_position_after_an_upstream_switch_is_left_to_the_protocol() -> None:
    """The native encoder writes no `position.upstream` (protocol 1.2): such rows go the usual
    way, so the upstream is never lost."""
    row = RowChange(
        source="s",
        ts=1,
        op=Op.INSERT,
        schema="d",
        table="t",
        schema_id=1,
        primary_key=("id",),
        before=None,
        after=(1,),
        txn=TxnRef("0-1-2", 0, 1),
        position=BinlogPosition("binlog.000001", 4, "0-1-2", upstream=1),
    )
    assert _native(row) is None
    assert _native(replace(row, position=replace(row.position, upstream=0))) is not None


def test_the_one_column_key_maker_is_int_key() -> None:
    prefix = fastrows.key_prefix("d", "t")
    for indexes in ((0,), (1,), (0, 1)):
        make = fastrows.key_maker(prefix, indexes)
        for row in ((1, 2), (-(2**63), 2**64 - 1), (2**64, 0), ("a", 1), (True, 1), (None, 0)):
            assert make(row) == fastrows.int_key(prefix, row, indexes), (indexes, row)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(row=rows(), partitions=st.integers(1, 64), at=st.integers(0, 3))
def test_a_native_record_is_the_protocol_record(row: RowChange, partitions: int, at: int) -> None:
    """`record_builder`'s one call gives the key, partition, value and headers the general
    path gives the row (`encode_key`, `java_partition`, `encode`), or None (the row then takes
    that path): never a different record."""
    build = fastrows.record_builder()
    assert build is not None
    image = row.after if row.after is not None else row.before
    assert image is not None
    prefix = fastrows.key_prefix(row.schema, row.table)
    record = build(
        "topic", fastrows.ROW_HEADER_LIST, prefix, at, partitions, row.source, row.ts,
        fastrows.OP_NUMBERS[row.op], row.schema, row.table, row.schema_id, row.primary_key,
        row.before, row.after, row.txn.id, row.txn.index, row.txn.count, row.position.file,
        row.position.offset, row.position.gtid,
    )  # fmt: skip
    key_value = image[at] if at < len(image) else None
    if type(key_value) is not int or not -(2**63) <= key_value < 2**64:
        assert record is None
        return
    if record is None:
        # Only a value the raw encoder does not vouch for (SET, ZeroDate, ...) leaves the row
        # to the general path.
        raw = fastrows._rows.row_change(
            row.source, row.ts, fastrows.OP_NUMBERS[row.op], row.schema, row.table,
            row.schema_id, row.primary_key, row.before, row.after, row.txn.id, row.txn.index,
            row.txn.count, row.position.file, row.position.offset, row.position.gtid, True,
        )  # fmt: skip
        assert raw is None
        return
    value = _native(row)
    assert value == encode(row, Encoding.PROTOBUF)[0]
    key = encode_key(row.schema, row.table, [key_value])
    assert record == (
        "topic",
        java_partition(key, partitions),
        key,
        value,
        list(fastrows.ROW_HEADERS),
    )


def test_a_native_record_of_a_row_keyed_by_large_integers() -> None:
    build = fastrows.record_builder()
    assert build is not None
    prefix = fastrows.key_prefix("d", "t")
    for v in (0, -1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1):
        record = build(
            "t", [], prefix, 0, 7, "s", 1, 1, "d", "t", 5, ("id",), None, (v, "x"), "0-1-2", 0, 1,
            "binlog.000001", 4, None,
        )  # fmt: skip
        key = encode_key("d", "t", [v])
        assert record is not None
        assert record[:3] == ("t", java_partition(key, 7), key)
    for v in (2**64, -(2**63) - 1, True, 1.0):
        assert build("t", [], prefix, 0, 7, "s", 1, 1, "d", "t", 5, ("id",), None, (v, "x"),
                     "0-1-2", 0, 1, "binlog.000001", 4, None) is None  # fmt: skip
