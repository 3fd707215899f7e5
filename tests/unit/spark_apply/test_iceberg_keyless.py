"""The Iceberg current state of a table without a primary key (`iceberg_keyless`, PROTOCOL.md
§9.3) through `IcebergTables.write_step` on a local SQL catalog (a sqlite file): equal rows
repeat, a delete or update removes exactly one of several equal rows, NULL equals NULL, a
float is compared by its bits, rows the read filter selects but no change touches are written
back unchanged, and a replayed step is skipped, not applied twice. The same through the
reader and Spark: tests/integration/txn_shapes/test_shapes_e2e.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, RowChange, TableSchema, TxnRef
from rowbus.routing.routes import Router
from rowbus.spark_apply.iceberg_keyless import KeylessRows
from rowbus.spark_apply.iceberg_sink import IcebergTables
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.settings import IcebergSettings

KEYLESS = TableSchema(
    "db",
    "k",
    (
        ColumnSchema("x", "int"),
        ColumnSchema("y", "varchar", length=10),
        ColumnSchema("f", "double"),
    ),
    (),
)


def bag(rows: Any) -> Counter[tuple[Any, ...]]:
    """Rows as a multiset, floats by their text (Python's == makes -0.0 equal to 0.0)."""
    return Counter(tuple(repr(v) if isinstance(v, float) else v for v in r) for r in rows)


class Steps:
    """`IcebergTables` (both forms) on a sqlite catalog, and row events of `KEYLESS`."""

    def __init__(self, tmp_path: Path) -> None:
        settings = IcebergSettings(
            catalog={
                "type": "sql",
                "uri": f"sqlite:///{tmp_path}/c.db",
                "warehouse": str(tmp_path),
            },
            forms=("current", "changelog"),
        )
        schemas = {KEYLESS.schema_id: KEYLESS}
        self.tables = IcebergTables(settings, Router((), "identity"), schemas.get, "job").start()
        self.offset = 0

    def event(self, op: Op, before: Any = None, after: Any = None) -> Envelope:
        self.offset += 1
        change = RowChange(
            source="s1",
            ts=self.offset,
            op=op,
            schema="db",
            table="k",
            schema_id=KEYLESS.schema_id,
            primary_key=(),
            before=before,
            after=after,
            txn=TxnRef(f"0-1-{self.offset}", 0, 1),
            position=BinlogPosition("b.000001", 4 + self.offset),
        )
        return Envelope("topic", 0, self.offset, change)

    def insert(self, *rows: tuple[Any, ...]) -> list[Envelope]:
        return [self.event(Op.INSERT, after=r) for r in rows]

    def delete(self, row: tuple[Any, ...]) -> Envelope:
        return self.event(Op.DELETE, before=row)

    def update(self, before: tuple[Any, ...], after: tuple[Any, ...]) -> Envelope:
        return self.event(Op.UPDATE, before=before, after=after)

    def current(self) -> Counter[tuple[Any, ...]]:
        table = self.tables._catalog.load_table(("db", "k"))
        return bag(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())

    def events_logged(self) -> int:
        return int(
            self.tables._catalog.load_table(("db", "k_changelog")).scan().to_arrow().num_rows
        )


def test_keyless_changes_remove_one_of_several_equal_rows_in_order(tmp_path: Path) -> None:
    s = Steps(tmp_path)
    a, n = (1, "a", 1.5), (2, None, None)
    s.tables.write_step(1, 0, s.insert(a, a, a, n, n, (3, "c", -0.0), (3, "c", 0.0)))
    assert s.current() == bag([a, a, a, n, n, (3, "c", 0.0), (3, "c", -0.0)])
    # No identifier fields: a keyless row may hold NULLs and repeat.
    assert s.tables._catalog.load_table(("db", "k")).schema().identifier_field_ids == []
    step = [
        s.delete(a),  # one of three
        s.update(n, (2, "b", None)),  # one of two NULL rows
        s.delete((3, "c", -0.0)),  # -0.0, not the 0.0 a float comparison finds equal
        *s.insert(a),
        s.update(a, (9, "z", 1.5)),  # of three equal rows again (one just inserted)
        s.delete((7, "never", None)),  # held by no row: changes nothing (logged)
    ]
    s.tables.write_step(1, 1, step)
    # (the -0.0 row went, not the 0.0 one)
    want = bag([a, a, n, (2, "b", None), (3, "c", 0.0), (9, "z", 1.5)])
    assert s.current() == want
    # A replay of the same (batch, step) finds its commit and changes nothing.
    assert s.tables.write_step(1, 1, step) == 0
    assert s.current() == want
    assert s.events_logged() == 7 + len(step)


def test_rows_the_filter_selects_but_no_change_touches_are_kept(tmp_path: Path) -> None:
    """The read filter names one column (here x IN (1, 2)): (1, 'b') and (2, 'a') are
    selected by a delete of (1, 'a') and (2, 'b') and must come back unchanged."""
    s = Steps(tmp_path)
    rows = [(1, "a", None), (1, "b", None), (2, "a", None), (2, "b", None), (5, "e", 2.0)]
    s.tables.write_step(1, 0, s.insert(*rows))
    s.tables.write_step(1, 1, [s.delete((1, "a", None)), s.delete((2, "b", None))])
    assert s.current() == bag([(1, "b", None), (2, "a", None), (5, "e", 2.0)])
    # Inserts only: an append, nothing read or rewritten.
    before = s.tables._catalog.load_table(("db", "k")).current_snapshot()
    s.tables.write_step(1, 2, s.insert((1, "b", None)))
    after = s.tables._catalog.load_table(("db", "k")).current_snapshot()
    assert after.summary.operation.value == "append"
    assert after.parent_snapshot_id == before.snapshot_id
    assert s.current() == bag([(1, "b", None), (1, "b", None), (2, "a", None), (5, "e", 2.0)])


@pytest.mark.parametrize(
    ("values", "distinct"),
    [((0.0, -0.0), 2), ((1.5, 1.5), 1), ((None, None), 1), (("A", "a"), 2)],
)
def test_rows_are_equal_when_the_source_calls_them_equal(
    values: tuple[Any, Any], distinct: int
) -> None:
    rows = KeylessRows()
    for v in values:
        rows.add((v,))
    assert len({str(r) for r in rows.expand()}) == distinct
    assert rows.remove((values[1],)) and len(rows.expand()) == 1


def test_a_primary_key_added_and_dropped_moves_the_identifier_fields(tmp_path: Path) -> None:
    """ADD PRIMARY KEY: the key's column becomes the identifier field (the rows, now unique,
    are kept); DROP PRIMARY KEY: no identifier fields again, the rows kept."""
    s = Steps(tmp_path)
    s.tables.write_step(1, 0, s.insert((1, "a", None), (2, "b", None)))
    x = ColumnSchema("x", "int", nullable=False)
    keyed = TableSchema("db", "k", (x, *KEYLESS.columns[1:]), ("x",))
    s.tables.evolve(keyed)
    table = s.tables._catalog.load_table(("db", "k"))
    assert table.schema().identifier_field_names() == {"x"}
    s.tables.evolve(TableSchema("db", "k", keyed.columns, ()))
    table = s.tables._catalog.load_table(("db", "k"))
    assert table.schema().identifier_field_ids == []
    assert s.current() == bag([(1, "a", None), (2, "b", None)])
