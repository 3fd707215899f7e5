"""Every record kind and every value type round-trips exactly through every encoding."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.events import BinlogPosition, Op, RowChange, TxnRef
from tests.unit.protocol.protocol_strategies import images, records, rows, strict, values

ENCODINGS = list(Encoding)


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: e.value)
@settings(max_examples=300, deadline=None)
@given(record=records)
def test_every_record_round_trips(encoding: Encoding, record: object) -> None:
    value, headers = encode(record, encoding)  # type: ignore[arg-type]
    back = decode(value, headers)
    assert back == record
    assert strict(back) == strict(record)


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: e.value)
@settings(max_examples=300, deadline=None)
@given(image=images)
def test_every_value_round_trips_exactly(encoding: Encoding, image: tuple[object, ...]) -> None:
    row = RowChange(
        source="s",
        ts=1,
        op=Op.INSERT,
        schema="d",
        table="t",
        schema_id=7,
        primary_key=(),
        before=None,
        after=image,  # type: ignore[arg-type]
        txn=TxnRef("x", 0),
        position=BinlogPosition("f", 4),
    )
    back = decode(*encode(row, encoding))
    assert strict(back) == strict(row)


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: e.value)
@settings(max_examples=100, deadline=None)
@given(row=rows(), nulls=st.lists(st.booleans(), min_size=10, max_size=10))
def test_same_shape_twice_uses_the_cached_path(
    encoding: Encoding, row: RowChange, nulls: list[bool]
) -> None:
    """The second encode/decode of a shape goes through the generated fast path."""
    for _ in range(2):
        assert strict(decode(*encode(row, encoding))) == strict(row)


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_a_value_alone_round_trips_through_the_generic_path(value: object) -> None:
    from rowbus.protocol.codec.image import join_generic, split_generic

    cols = split_generic((value,))  # type: ignore[arg-type]
    assert strict(join_generic(*cols)) == strict((value,))


def test_headers_name_version_encoding_and_kind() -> None:
    from rowbus.protocol.events import Resolved

    _, headers = encode(Resolved(source="db1", ts=5), Encoding.AVRO)
    assert headers == [
        ("rowbus-version", b"1.5"),
        ("rowbus-encoding", b"avro"),
        ("rowbus-kind", b"resolved"),
    ]


def test_zero_dates_round_trip_in_every_encoding_and_bad_ones_are_refused() -> None:
    from rowbus.protocol.errors import ProtocolError
    from rowbus.protocol.golden import SAMPLES
    from rowbus.protocol.values import Kind, ZeroDate, kind_of

    zeros = (ZeroDate("0000-00-00"), ZeroDate("0000-00-00 00:00:00.000"), ZeroDate("2024-00-15"))
    row = replace(SAMPLES["row_insert"], after=(1, *zeros, None))
    for encoding in Encoding:
        value, headers = encode(row, encoding)
        assert decode(value, headers) == row
    assert kind_of(zeros[0]) is Kind.ZERO_DATE
    for bad in ("2024-05-01", "0000-13-00", "0000-00-00 24:00:00", "0-0-0", "0000-00-00T00:00"):
        with pytest.raises(ProtocolError):
            ZeroDate(bad)
