"""`boundaries.check`: which offset a changed boundary names, and how it says what changed."""

from __future__ import annotations

import pytest

from rowbus.spark_apply.boundaries import Boundary, check, window_of
from rowbus.spark_apply.exceptions import LogChangedError

_BEFORE = Boundary(since=84, end=100, records=((90, 1000, 7), (93, 1001, 8), (97, 1002, 9)))


def _raised(now: tuple[tuple[int, int, int], ...]) -> LogChangedError:
    with pytest.raises(LogChangedError) as raised:
        check("cdc.s1", 3, _BEFORE, now)
    return raised.value


def test_the_same_records_pass() -> None:
    check("cdc.s1", 3, _BEFORE, _BEFORE.records)


def test_a_replaced_record_is_named_by_its_offset() -> None:
    error = _raised(((90, 1000, 7), (93, 2001, 8), (97, 1002, 9)))
    assert (error.offset, error.end) == (93, 100)
    assert str(error).startswith("cdc.s1[3]@93: the record the job read there is another record")


def test_a_lost_record_is_named_even_when_a_later_one_moved_down() -> None:
    # Records lost and their offsets refilled: the first difference is the earliest offset.
    error = _raised(((88, 3000, 1), (90, 1000, 7)))
    assert error.offset == 88
    assert "appeared after the job had read past it" in str(error)
    assert _raised(((90, 1000, 7), (97, 1002, 9))).offset == 93
    assert "is gone" in str(_raised(((90, 1000, 7), (97, 1002, 9))))


def test_the_window_never_starts_below_the_log_start() -> None:
    assert window_of(100, 0) == (84, 100)
    assert window_of(10, 0) == (0, 10)
    assert window_of(100, 95) == (95, 100)
