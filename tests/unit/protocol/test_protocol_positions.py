"""The one start-position grammar, shared by the reader, `rowbus tail` and the Subscriber."""

from __future__ import annotations

import pytest

from rowbus.consumers.exceptions import StartPositionError
from rowbus.merge.start import StartFrom
from rowbus.producer.exceptions import BadStartPositionError
from rowbus.producer.start import parse_start as reader_start
from rowbus.protocol.positions import parse_gtid, parse_gtid_set, parse_start


def test_every_form() -> None:
    assert parse_start("earliest").kind == "earliest"
    assert parse_start(" latest ").kind == "latest"
    f = parse_start("file:mysql-bin.000003:1234")
    assert (f.kind, f.file, f.offset, f.source) == ("file", "mysql-bin.000003", 1234, None)
    g = parse_start("source1@gtid:0-1-42,1-2-7")
    assert (g.kind, g.source, g.gtid_set) == ("gtid", "source1", "0-1-42,1-2-7")
    mysql = parse_start("gtid:3E11FA47-71CA-11E1-9E33-C80AA9429562:1-42")
    assert mysql.gtid_set == "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-42"
    assert parse_start("timestamp:1700000000.5").timestamp_ms == 1_700_000_000_500
    assert parse_start("timestamp:2023-11-14T22:13:20").timestamp_ms == 1_700_000_000_000
    assert parse_start("timestamp:2023-11-14T23:13:20+01:00").timestamp_s == 1_700_000_000


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "nowhere",
        "file:x",
        "file:x:1",
        "gtid:",
        "gtid:banana",
        "timestamp:soon",
        "a b@gtid:0-1-1",
        "source1@timestamp:5",
        "ts:5",
        "pos:s:f:4",
    ],
)
def test_a_bad_form_names_every_accepted_one(bad: str) -> None:
    with pytest.raises(ValueError, match="earliest, latest, timestamp"):
        parse_start(bad)


def test_the_reader_and_the_subscriber_read_the_same_text() -> None:
    assert reader_start("file:b.000001:4").offset == 4
    with pytest.raises(BadStartPositionError, match="names source 'other'"):
        reader_start("other@file:b.000001:4", "source1")
    assert StartFrom.parse("timestamp:1700000000").timestamp_ms == 1_700_000_000_000
    at = StartFrom.parse("source1@file:b.000001:4")
    assert (at.kind, at.source) == ("position", "source1")
    assert StartFrom.parse("source2@gtid:0-2-9").gtid == "0-2-9"
    with pytest.raises(StartPositionError, match="source1@gtid:0-1-1"):
        StartFrom.parse("gtid:0-1-1")


def test_gtids() -> None:
    assert parse_gtid("0-1-42") == ("0", 42)
    assert parse_gtid("3E11FA47-71CA-11E1-9E33-C80AA9429562:7")[1] == 7
    assert parse_gtid_set("0-1-42,0-1-40,1-2-7") == {"0": 42, "1": 7}


U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_tagged_gtids_are_streams_of_their_own() -> None:
    """MySQL 8.3+: ``uuid:tag:N`` numbers its transactions apart from ``uuid:N``; a tag in a
    set applies to the ranges after it; tags compare case-insensitively."""
    from rowbus.protocol.positions import format_gtid_set, parse_gtid, parse_gtid_set

    assert parse_gtid(f"{U}:Blue:7") == (f"{U}:blue", 7)
    assert parse_gtid(f"{U}:7") == (U, 7)
    got = parse_gtid_set(f"{U}:1-42:blue:1-5:7-9:green:3, {U.upper()}:50")
    assert got == {U: 50, f"{U}:blue": 9, f"{U}:green": 3}
    assert format_gtid_set({U: 42, f"{U}:blue": 9, f"{U}:green": 1}) == (
        f"{U}:1-42:blue:1-9:green:1"
    )
    assert parse_gtid_set(format_gtid_set(got)) == got
    assert parse_start(f"gtid:{U}:blue:5").gtid_set == f"{U}:blue:5"
