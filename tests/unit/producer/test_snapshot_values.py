"""The snapshot's temporal texts (`rowbus.producer.snapshot.values`): the cheap zero-date test
and the parse agree with the full check for every date shape the server prints."""

from __future__ import annotations

import datetime as dt

import pytest

from rowbus.producer.snapshot.values import row_converter
from rowbus.protocol.events import ColumnSchema
from rowbus.protocol.values import ZeroDate

COLS = (ColumnSchema("d", "date"), ColumnSchema("t", "datetime"), ColumnSchema("s", "timestamp"))


@pytest.mark.parametrize(
    ("text", "date"),
    [
        ("2024-02-29", dt.date(2024, 2, 29)),
        ("0001-01-01", dt.date(1, 1, 1)),
        ("9999-12-31", dt.date(9999, 12, 31)),
        ("0000-00-00", None),
        ("0000-01-01", None),
        ("2024-00-10", None),
        ("2024-10-00", None),
        ("2023-02-29", None),  # ALLOW_INVALID_DATES: a day the month lacks
        ("2024-04-31", None),
    ],
)
def test_dates_zero_and_invalid_dates(text: str, date: dt.date | None) -> None:
    convert = row_converter(COLS)
    d, t, s = convert((text, f"{text} 01:02:03.000004", f"{text} 01:02:03"))
    if date is None:
        assert (d, t, s) == (
            ZeroDate(text),
            ZeroDate(f"{text} 01:02:03.000004"),
            ZeroDate(f"{text} 01:02:03"),
        )
    else:
        assert d == date
        assert t == dt.datetime.combine(date, dt.time(1, 2, 3, 4))
        assert s == dt.datetime.combine(date, dt.time(1, 2, 3), tzinfo=dt.UTC)


def test_only_the_columns_that_need_it_are_converted_and_null_stays() -> None:
    convert = row_converter((ColumnSchema("i", "int"), *COLS, ColumnSchema("b", "bit")))
    assert convert((1, None, None, None, b"\x01\x00")) == (1, None, None, None, 256)
