"""SQL literals of the apply fast path: one formatter per protocol value type."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from rowbus.protocol.values import ZeroDate
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import delete_statements, upsert_statements
from rowbus.spark_apply.literals import literal, row_literal


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        (None, "NULL"),
        (-(2**63), "-9223372036854775808"),
        (2**64 - 1, "18446744073709551615"),
        (0.1, "0.1"),
        (1e300, "1e+300"),
        (Decimal("-12.50"), "-12.50"),
        (Decimal("1E+3"), "1000"),
        ("it's \\ a\nline\x00", "'it\\'s \\\\ a\\nline\\0'"),
        ("žluť 🐍", "'žluť 🐍'"),
        (b"\x00'\xff", "X'0027ff'"),
        (b"", "''"),
        (dt.date(2024, 2, 29), "'2024-02-29'"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), "'2024-01-02 03:04:05.000006'"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), "'2024-01-02 03:04:05'"),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "'2024-01-02 01:04:05'",
        ),
        (dt.timedelta(hours=-1, seconds=3), "'-00:59:57'"),
        (dt.timedelta(hours=838, microseconds=5), "'838:00:00.000005'"),
        (frozenset({"b", "a"}), "'a,b'"),
        (frozenset(), "''"),
        (-dt.timedelta(microseconds=250_000), "'-00:00:00.250000'"),
        (
            -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999_999),
            "'-838:59:59.999999'",
        ),
        (ZeroDate("0000-00-00 00:00:00.000"), "'0000-00-00 00:00:00.000'"),
        (ZeroDate("2024-00-15"), "'2024-00-15'"),
    ],
)
def test_literal(value: object, sql: str) -> None:
    assert literal(value) == sql  # type: ignore[arg-type]


def test_not_a_value() -> None:
    with pytest.raises(TypeError, match="bool"):
        row_literal((1, True))


def test_statements_are_split_by_size() -> None:
    t = Target("d", "t")
    rows = [(i, f"v{i}") for i in range(100)]
    stmts = list(upsert_statements(t, ("id", "v"), ("id",), rows, max_bytes=200))
    assert len(stmts) > 5
    assert all(s.startswith("INSERT INTO `d`.`t` (`id`, `v`) VALUES (") for s in stmts)
    assert all(s.endswith(" ON DUPLICATE KEY UPDATE `v` = VALUES(`v`)") for s in stmts)
    assert "".join(stmts).count("),(") + len(stmts) == 100
    [one] = delete_statements(t, ("id",), [(1,), (2,)])
    assert one == "DELETE FROM `d`.`t` WHERE `id` IN (1,2)"
    [two] = delete_statements(t, ("a", "b"), [(1, "x"), (2, "y")])
    assert two == "DELETE FROM `d`.`t` WHERE (`a`, `b`) IN ((1,'x'),(2,'y'))"
