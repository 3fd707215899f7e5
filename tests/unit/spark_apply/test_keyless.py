"""Statements of a table without a primary key: in order, each change on one row matching
every column NULL-safely."""

from __future__ import annotations

from rowbus.protocol.events import Op
from rowbus.routing.routes import Target
from rowbus.spark_apply.changes import KeylessChange, keyless_statements
from rowbus.spark_apply.planner import Envelope
from tests.unit.spark_apply.events import resolved

ENV = Envelope("t", 0, 0, resolved(1))
COLS = ("x", "y")


def change(
    op: Op, before: tuple[object, ...] | None, after: tuple[object, ...] | None
) -> KeylessChange:
    return KeylessChange(op, COLS, before, after, ENV)  # type: ignore[arg-type]


def test_inserts_run_together_and_deletes_and_updates_touch_one_matching_row() -> None:
    sql = list(
        keyless_statements(
            Target("d", "k"),
            [
                change(Op.INSERT, None, (1, "a")),
                change(Op.INSERT, None, (1, "a")),
                change(Op.UPDATE, (2, None), (2, "b")),
                change(Op.UPDATE, (3, "c"), (3, "c")),
                change(Op.DELETE, (1, "a"), None),
                change(Op.INSERT, None, (5, None)),
            ],
        )
    )
    assert sql == [
        "INSERT INTO `d`.`k` (`x`, `y`) VALUES (1,'a'),(1,'a')",
        "UPDATE `d`.`k` SET `x` = 2, `y` = 'b' WHERE `x` <=> 2 AND `y` <=> NULL LIMIT 1",
        "DELETE FROM `d`.`k` WHERE `x` <=> 1 AND `y` <=> 'a' LIMIT 1",
        "INSERT INTO `d`.`k` (`x`, `y`) VALUES (5,NULL)",
    ]


def test_snapshot_rows_of_a_keyless_table_are_inserts() -> None:
    """PROTOCOL.md §9.5: a read row is shaped like an insert; before 1.3 this failed on the
    before image an insert does not have."""
    sql = list(
        keyless_statements(
            Target("d", "k"),
            [change(Op.READ, None, (1, "a")), change(Op.READ, None, (2, "b"))],
        )
    )
    assert sql == ["INSERT INTO `d`.`k` (`x`, `y`) VALUES (1,'a'),(2,'b')"]
