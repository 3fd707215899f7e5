"""The tables a released stream leaves, in memory: the conformance kit's reference applier.

Released transactions (PROTOCOL.md §9 step 6) applied in order as §9.3, §9.5 and §9.7 say —
a keyed row replaced or deleted by its primary key (a read row is an upsert), a keyless row
inserted or deleted one by one as a multiset of whole rows, a `create_table` DDL making an
empty table where none is (its `table_schema` names the key columns; IF NOT EXISTS keeps a
table held), a `snapshot_begin` emptying a keyless table or starting a keyed table's seen set,
a `snapshot_end` deleting the keyed rows not seen since — so a stream vector can carry the
final tables a conforming consumer ends with, not only the release order. Rows of a table no
DDL of the stream created are not applied, and the table is not listed (its key columns are
unknown: a vector that checks tables creates each). Sized for vectors: all in memory.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rowbus.protocol.codec.jsonc import value_to_json
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import DdlChange, RowChange, SnapshotBegin, SnapshotEnd
from rowbus.protocol.values import Value

Row = tuple[Value, ...]
Event = RowChange | DdlChange | SnapshotBegin | SnapshotEnd


@dataclass
class _Table:
    key: tuple[int, ...]
    """Positions of the primary-key columns; empty: keyless (rows identified by all columns)."""
    keyed: dict[Row, Row] = field(default_factory=dict)
    keyless: Counter[Row] = field(default_factory=Counter)
    seen: set[Row] | None = None
    """The keys seen since a `snapshot_begin` of a keyed table (§9.7); None: none runs."""

    def apply(self, ev: RowChange) -> None:
        if not self.key:
            if ev.before is not None:
                if self.keyless[ev.before] <= 0:
                    raise ValueError(f"{ev.schema}.{ev.table}: no row {ev.before} at {ev.position}")
                self.keyless[ev.before] -= 1
            if ev.after is not None:
                self.keyless[ev.after] += 1
            return
        if ev.before is not None:
            self.keyed.pop(tuple(ev.before[i] for i in self.key), None)
        if ev.after is not None:
            key = tuple(ev.after[i] for i in self.key)
            self.keyed[key] = ev.after
            if self.seen is not None:
                self.seen.add(key)

    def rows(self) -> list[Row]:
        return list(self.keyed.values()) if self.key else list(self.keyless.elements())


class Tables:
    """Apply released events in order with `apply`; `as_json` gives the tables."""

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}

    def apply(self, events: Iterable[Event]) -> None:
        for ev in events:
            name = f"{ev.schema}.{ev.table}"
            match ev:
                case RowChange():
                    table = self._tables.get(name)
                    if table is not None:
                        table.apply(ev)
                case DdlChange():
                    self._ddl(ev)
                case SnapshotBegin():
                    held = self._tables.get(name)
                    if held is not None and held.key:
                        held.seen = set()
                    elif held is not None:
                        held.keyless.clear()
                case SnapshotEnd():
                    held = self._tables.get(name)
                    if held is not None and held.seen is not None:
                        seen = held.seen
                        held.keyed = {k: r for k, r in held.keyed.items() if k in seen}
                        held.seen = None

    def _ddl(self, ev: DdlChange) -> None:
        if ev.table is None or ev.table_schema is None:
            return
        name = f"{ev.schema}.{ev.table}"
        if ev.kind is DdlKind.DROP_TABLE:
            self._tables.pop(name, None)
        elif ev.kind is DdlKind.TRUNCATE_TABLE and name in self._tables:
            held = self._tables[name]
            held.keyed.clear()
            held.keyless.clear()
        elif ev.kind is DdlKind.CREATE_TABLE and name not in self._tables:
            names = [c.name for c in ev.table_schema.columns]
            self._tables[name] = _Table(tuple(names.index(k) for k in ev.table_schema.primary_key))

    def as_json(self) -> dict[str, list[Any]]:
        """Every table's rows in the JSON form of §5.3, sorted by their JSON text."""
        out: dict[str, list[Any]] = {}
        for name in sorted(self._tables):
            rows = [[value_to_json(v) for v in r] for r in self._tables[name].rows()]
            out[name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))
        return out
