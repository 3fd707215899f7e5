"""`rowbus verify` against Iceberg: a value as pymysql reads it from the source, taken to what
the Iceberg sink stores for it (`rowbus.verify.iceberg._stored`), and rows compared with SET
members as sets (`_same`)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from rowbus.verify.iceberg import _same, _stored


@pytest.mark.parametrize(
    ("value", "iceberg_type", "stored"),
    [
        (dt.timedelta(hours=-1, microseconds=5), "long", -3_599_999_995),  # negative TIME
        (dt.timedelta(hours=838, minutes=59, seconds=59), "long", 3_020_399_000_000),
        (b"\x01\x00", "long", 256),  # BIT(16)
        (b"\xff" * 8, "decimal(20, 0)", Decimal(2**64 - 1)),  # BIT(64)
        (2**64 - 1, "decimal(20, 0)", Decimal(2**64 - 1)),  # BIGINT UNSIGNED
        (1.1, "float", 1.100000023841858),  # FLOAT: the binary32 the source stores
        (1.1, "double", 1.1),
        ("0000-00-00", "date", None),  # a zero date: NULL in the sink (zero_dates: null)
        (
            dt.datetime(2024, 1, 2, 3, 4, 5),
            "timestamptz",
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        ),
        (dt.datetime(2024, 1, 2, 3, 4, 5), "timestamp", dt.datetime(2024, 1, 2, 3, 4, 5)),
        (b"\x00\x01", "binary", b"\x00\x01"),
        (None, "long", None),
    ],
)
def test_a_source_value_becomes_what_the_sink_stores(
    value: Any, iceberg_type: str, stored: Any
) -> None:
    assert _stored(value, iceberg_type) == stored


def test_set_members_compare_as_sets_and_other_values_exactly() -> None:
    row = (1, _stored({"b", "a"}, "string"), "x")
    assert _same(row, (1, "a,b", "x"))
    assert _same(row, (1, "b,a", "x"))
    assert not _same(row, (1, "a", "x"))
    assert not _same(row, (1, "a,b", "y"))
    assert _same((1, _stored(set(), "string")), (1, ""))
