"""The Iceberg current state of a table without a primary key (PROTOCOL.md §9.3).

A row of such a table is all its columns (NULL equal to NULL) and equal rows may repeat; a
DELETE or UPDATE removes exactly one row equal to its before image. Iceberg has no "delete one
of these rows", so a step's changes of the table are applied in one commit by `rewrite`:

1. read the rows a filter selects (`keyless_filter`: the int, long or string column with the
   most distinct values among the step's before images, IN those values or NULL) — every row
   equal to a before image, maybe others;
2. apply the step's changes to those rows one by one, in binlog order, as a multiset
   (`KeylessRows`: an insert adds its after image, a delete removes one row equal to its
   before image, an update both);
3. in one commit, delete the rows the same filter selects and append the multiset as the
   changes left it.

Why it is exact: the filter's rows are read and deleted from the same snapshot by the same
expression (pyiceberg evaluates both through Arrow; the delete keeps a row the filter leaves
NULL), so what is deleted is what was read; rows the filter selects that no change touches
are written back unchanged; equal rows are indistinguishable, so which one of several a
change removes does not matter. Values are compared as the table stores them (the images go
through the table's Arrow types first) and exactly: a float by its bits, so -0.0 is not 0.0
(the binlog's before image is the row the source changed, not a row that compares equal
under a collation or IEEE). A commit another writer beat is either rebased by pyiceberg (its
delete filter evaluated again on the new files, which is exact when the other commit only
rewrote files, as a compaction does; one that added files the filter matches fails its
validation) or begun again by the caller from step 1, on the table as it is then.

Not idempotent: a replayed step would remove another of several equal rows. The step's
snapshot summary (``rowbus.batch``/``rowbus.step``, `iceberg_sink._committed`) is what keeps
a replay from applying it twice, as for the change log's appends. A step of inserts only is
an append (nothing read). A change whose before image the table does not hold changes
nothing and is logged (the table differs from the source; `rowbus verify` shows it).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rowbus.protocol.events import RowChange
from rowbus.protocol.values import Value
from rowbus.spark_apply.iceberg_schema import Layout
from rowbus.spark_apply.planner import Envelope

log = logging.getLogger(__name__)

_FILTERED = ("int", "long", "string")
"""Iceberg types the read filter names (`keyless_filter`): each compares by value, as Python
does, in pyiceberg's expressions and Arrow's."""


@dataclass(frozen=True, slots=True)
class KeylessChange:
    """One row event, its images as the table stores them (None: the side it lacks)."""

    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    where: str
    """Where it comes from (binlog position, op, target), for the log."""


def keyless_changes(
    lay: Layout,
    events: Sequence[tuple[Envelope, RowChange]],
    stored: Callable[[list[tuple[Value, ...]]], list[tuple[Any, ...]]],
) -> list[KeylessChange]:
    """A step's row events of one table, their images converted by `stored` (to what the
    table stores), in order."""
    p = lay.projection
    befores = iter(stored([p.values(e.before) for _, e in events if e.before is not None]))
    afters = iter(stored([p.values(e.after) for _, e in events if e.after is not None]))
    return [
        KeylessChange(
            None if ev.before is None else next(befores),
            None if ev.after is None else next(afters),
            f"{env.position} {ev.op.value} of {lay.target}",
        )
        for env, ev in events
    ]


def rewrite(table: Any, changes: Sequence[KeylessChange], marker: dict[str, str]) -> int:
    """Apply `changes` to `table` in one commit carrying `marker`; the changes applied."""
    import pyarrow as pa

    befores = [c.before for c in changes if c.before is not None]
    where = keyless_filter(table.schema(), befores) if befores else None
    read = where is not None and table.current_snapshot() is not None
    rows = KeylessRows()
    if read:
        for row in table.scan(row_filter=where).to_arrow().to_pylist():
            rows.add(tuple(row.values()))
    for change in changes:
        if change.before is not None and not rows.remove(change.before):
            log.warning(
                "%s changes no row: the Iceberg table holds none equal to its before image "
                "(it differs from the source)",
                change.where,
            )
        if change.after is not None:
            rows.add(change.after)
    schema = table.schema().as_arrow()
    data = pa.Table.from_pylist(
        [dict(zip(schema.names, r, strict=True)) for r in rows.expand()], schema=schema
    )
    with table.transaction() as tx:
        if read:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Delete operation did not match")
                tx.delete(where, snapshot_properties=marker)
        tx.append(data, snapshot_properties=marker)
    return len(changes)


def keyless_filter(schema: Any, images: Sequence[tuple[Any, ...]]) -> Any:
    """A filter selecting every row of `schema`'s table equal to one of `images` (and maybe
    others): of the int, long and string columns, the one whose values among the images are
    the most distinct, IN those values (or NULL). One column, not all: pyiceberg binds every
    literal of an IN each time it evaluates the filter, which costs more than reading and
    writing back the few extra rows a looser filter selects (a row selected and not changed
    is written back as it was). A table without such a column is read whole."""
    from pyiceberg.expressions import AlwaysTrue, In, IsNull, Or

    best: tuple[int, str, set[Any]] | None = None
    for i, f in enumerate(schema.fields):
        if str(f.field_type) in _FILTERED:
            values = {img[i] for img in images}
            if best is None or len(values) > best[0]:
                best = (len(values), f.name, values)
    if best is None:
        return AlwaysTrue()
    _, name, values = best
    present = sorted(values - {None})
    term: Any = In(term=name, literals=present) if present else None
    if None in values:
        term = IsNull(term=name) if term is None else Or(term, IsNull(term=name))
    return term


def _exact(value: Any) -> Any:
    """`value` as a multiset key that tells apart what the source tells apart: a float by
    its bits (-0.0 is not 0.0), anything else by Python's equality of the stored value."""
    return ("float", value.hex()) if isinstance(value, float) else value


class KeylessRows:
    """Rows as a multiset keyed exactly (`_exact`): removing one of several equal rows
    removes any of them, they are indistinguishable."""

    def __init__(self) -> None:
        self._rows: dict[tuple[Any, ...], list[Any]] = {}

    def add(self, row: tuple[Any, ...]) -> None:
        held = self._rows.setdefault(tuple(_exact(v) for v in row), [row, 0])
        held[1] += 1

    def remove(self, row: tuple[Any, ...]) -> bool:
        """One row equal to `row` removed; False when there is none."""
        held = self._rows.get(tuple(_exact(v) for v in row))
        if held is None or held[1] == 0:
            return False
        held[1] -= 1
        return True

    def expand(self) -> list[tuple[Any, ...]]:
        """Every row, each as many times as it is held."""
        return [row for row, count in self._rows.values() for _ in range(count)]
