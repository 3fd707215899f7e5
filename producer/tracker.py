"""The reader's shadow schema: every table as it is at the reader's position in the binlog.

The binlog's table map (FULL row metadata) gives a table's columns, types, lengths,
nullability, collations and primary key exactly as they were when each row was written; it
does not give column DEFAULTs nor secondary indexes, and it shows nothing between two DDLs of a
table with no row in between. So, as DM's schema tracker does, `SchemaTracker` keeps its own
copy of each table and applies every DDL it reads to it (`rowbus.producer.ddl.apply`, the body
of the one DDL parser): each DDL's after-schema is exact when it is read, however far behind
the live server the reader is, and even when another DDL follows before any row.

- A table is known from the CREATE TABLE the reader reads, or — met first in a table map —
  from the table map plus what the live server says of its defaults, indexes and default
  charset at that moment (the one place the live server is asked; a table created before the
  reader's start position has no other source).
- Each table map is checked against the tracked state (`layout`); a mismatch (a statement
  the interpreter got wrong) logs a warning and the table map wins for what it carries.
- A statement the interpreter does not model (CREATE TABLE … SELECT, generated columns,
  foreign keys, …) makes the table *unknown*: its DDL is published with the schema of the next
  table map (`rowbus.producer.batch`), and the table is loaded again at that table map.

State changes are stamped with the binlog position where they happen, so a new stream from an
earlier position (a reconnect) `rewind`s them, and `durable(position)` gives the states as of a
committed checkpoint, which the reader writes next to it on the checkpoints topic and a new term
`restore`s (a table whose state is not stored is unknown, i.e. loaded again when met).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from rowbus.producer.ddl.apply import (
    Charsets,
    DdlApplyError,
    TableDef,
    alter_table,
    create_index,
    create_table,
    drop_index,
    layout,
)
from rowbus.producer.ddl.words import MARIADB_CHARSETS
from rowbus.protocol.ddl import DdlKind, ParsedDdl, TableName
from rowbus.protocol.events import IndexSchema, TableSchema

log = logging.getLogger(__name__)

PositionKey = tuple[int, str, int]
"""(binlog file number, file name, offset): binlog order."""


@dataclass(frozen=True, slots=True)
class Extras:
    """What the live server says of a table beyond the table map: column defaults (name →
    DEFAULT text, None for no DEFAULT clause), secondary indexes and default collation."""

    defaults: Mapping[str, str | None]
    indexes: tuple[IndexSchema, ...]
    collation: str | None = None


Fetch = Callable[[str, str], Extras | None]
"""Reads a table's extras from the live server (None: the table does not exist)."""


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
"""A table whose state the tracker cannot tell (loaded again at its next table map)."""

State = TableDef | None | _Unknown
"""A table's tracked state: its definition, None when it does not exist, or UNKNOWN."""


@dataclass(frozen=True, slots=True)
class DdlSchema:
    """What the tracker says of a DDL: `known` False when it cannot tell (the caller falls back
    to the next table map); else `table` is the schema after it (None: dropped or no table)."""

    known: bool
    table: TableSchema | None = None


@dataclass
class SchemaTracker:
    fetch: Fetch
    charsets: Callable[[], Charsets] = lambda: MARIADB_CHARSETS
    database_collation: Callable[[str], str | None] = lambda db: None
    _tables: dict[TableName, State] = field(default_factory=dict)
    _generation: dict[TableName, int] = field(default_factory=dict)
    _undo: list[tuple[PositionKey, TableName, State]] = field(default_factory=list)
    _databases: dict[str, str | None] = field(default_factory=dict)
    _charsets: Charsets | None = None
    _restored: dict[TableName, TableSchema] = field(default_factory=dict)
    """Stored states not yet used (made a `TableDef` when first needed: one server query for
    the table's default collation, not one per table at start)."""
    _named: set[TableName] = field(default_factory=set)
    """Tables a DDL read or a stored state made known (whatever their state now)."""
    undefined: set[TableName] = field(default_factory=set)
    """Tables first met in a table map: known neither from a DDL read nor from a stored
    state, so no definition of theirs was published (PROTOCOL.md §9.6). The reader takes
    them out once it publishes one."""

    # ---- state ------------------------------------------------------------------------------

    def state(self, name: TableName) -> State:
        stored = self._restored.pop(name, None)
        if stored is not None and name not in self._tables:
            extras = self.fetch(name.schema, name.table)
            collation = (extras.collation if extras else None) or self._db_collation(name.schema)
            self._tables[name] = TableDef.of(stored, collation)
        return self._tables.get(name, UNKNOWN)

    def generation(self, schema: str, table: str) -> int:
        """Grows each time the table's state changes (a cache key for row schemas)."""
        return self._generation.get(TableName(schema, table), 0)

    def _set(self, at: PositionKey, name: TableName, state: State) -> None:
        self._undo.append((at, name, self.state(name)))
        self._restored.pop(name, None)
        if state is UNKNOWN:
            self._tables.pop(name, None)
        else:
            self._tables[name] = state
        self._generation[name] = self._generation.get(name, 0) + 1

    def restore(self, tables: Mapping[TableName, TableSchema | None]) -> None:
        """States stored with the checkpoint a term resumes from (None: unknown)."""
        for name, table in tables.items():
            self._named.add(name)
            if table is not None and table.columns:
                self._restored[name] = table

    def rewind(self, at: PositionKey) -> None:
        """Undo every change made after `at` (a new stream reads from there again)."""
        while self._undo and self._undo[-1][0] > at:
            _, name, before = self._undo.pop()
            if before is UNKNOWN:
                self._tables.pop(name, None)
            else:
                self._tables[name] = before
            self._generation[name] = self._generation.get(name, 0) + 1

    def durable(self, at: PositionKey) -> list[tuple[TableName, TableSchema | None]]:
        """The states, as of `at`, of the tables changed up to `at` since the last call (None:
        unknown or absent); changes after `at` stay pending."""
        done = [u for u in self._undo if u[0] <= at]
        later = [u for u in self._undo if u[0] > at]
        self._undo = later
        out: list[tuple[TableName, TableSchema | None]] = []
        for name in dict.fromkeys(n for _, n, _ in done):
            state: State = next((b for _, n, b in later if n == name), self.state(name))
            out.append((name, state.schema_of() if isinstance(state, TableDef) else None))
        return out

    # ---- server facts -------------------------------------------------------------------------

    def _cs(self) -> Charsets:
        if self._charsets is None:
            self._charsets = self.charsets()
        return self._charsets

    def _db_collation(self, database: str) -> str:
        if database not in self._databases:
            self._databases[database] = self.database_collation(database)
        found = self._databases[database]
        return found or self._cs().collation_of("utf8mb4")

    # ---- table maps ---------------------------------------------------------------------------

    def on_table_map(self, table: TableSchema, at: PositionKey) -> TableSchema:
        """The schema of rows written with table map `table`: the tracked state when the table
        map confirms it, else the table map with what is known of defaults and indexes."""
        name = TableName(table.schema, table.table)
        state = self.state(name)
        if isinstance(state, TableDef):
            tracked = state.schema_of()
            if layout(tracked) == layout(table):
                return tracked
            log.warning(
                "schema tracker: %s as tracked differs from its table map at %s:%s; the table "
                "map wins (tracked %s, binlog %s)",
                name,
                at[1],
                at[2],
                layout(tracked),
                layout(table),
            )
            defaults = {c.name: c.default for c in state.columns}
            indexes = state.schema_of().indexes
            collation = state.collation
        else:
            if name not in self._named:
                self.undefined.add(name)
            extras = self.fetch(name.schema, name.table)
            defaults = dict(extras.defaults) if extras else {}
            indexes = extras.indexes if extras else ()
            collation = (extras.collation if extras else None) or self._db_collation(name.schema)
        present = set(table.column_names)
        merged = replace(
            table,
            columns=tuple(
                replace(c, default=defaults[c.name]) if c.name in defaults else c
                for c in table.columns
            ),
            indexes=tuple(i for i in indexes if set(i.columns) <= present),
        )
        self._set(at, name, TableDef.of(merged, collation))
        return merged

    # ---- DDL ----------------------------------------------------------------------------------

    def on_ddl(self, parsed: ParsedDdl, statement: str, at: PositionKey) -> DdlSchema:
        """Apply a DDL read at `at`; what its after-schema is."""
        # A table this statement creates (or renames into) is defined by it downstream.
        if parsed.kind in (DdlKind.CREATE_TABLE, DdlKind.CREATE_TABLE_LIKE) and parsed.table:
            self._named.add(parsed.table)
        self._named.update(new for _, new in parsed.renames)
        try:
            return self._apply(parsed, statement, at)
        except DdlApplyError as exc:
            for name in parsed.touched:
                self._set(at, name, UNKNOWN)
            for _, new in parsed.renames:
                self._set(at, new, UNKNOWN)
            log.info(
                "schema tracker: %s at %s:%s not modelled (%s); its tables are loaded again "
                "from their next table map",
                parsed.kind.value,
                at[1],
                at[2],
                exc,
            )
            return DdlSchema(False)

    def _apply(self, parsed: ParsedDdl, statement: str, at: PositionKey) -> DdlSchema:
        kind = parsed.kind
        if parsed.temporary or kind is DdlKind.OTHER:
            return DdlSchema(True)
        if kind in (DdlKind.CREATE_DATABASE, DdlKind.ALTER_DATABASE, DdlKind.DROP_DATABASE):
            assert parsed.database is not None or kind is DdlKind.ALTER_DATABASE
            db = parsed.database or ""
            self._databases.pop(db, None)  # read again when a table needs it
            if kind is DdlKind.DROP_DATABASE:
                for name in [n for n in (*self._tables, *self._restored) if n.schema == db]:
                    self._set(at, name, None)
            return DdlSchema(True)
        if kind is DdlKind.DROP_TABLE:
            for name in parsed.tables:
                self._set(at, name, None)
            return DdlSchema(True)
        if kind is DdlKind.RENAME_TABLE:
            moved = [(old, new, self.state(old)) for old, new in parsed.renames]
            for old, new, state in moved:
                self._set(at, old, None if state is not UNKNOWN else UNKNOWN)
                self._set(
                    at,
                    new,
                    state.copy(new.schema, new.table) if isinstance(state, TableDef) else state,
                )
            return self._result(parsed.table)
        target = parsed.table
        assert target is not None
        if kind is DdlKind.CREATE_TABLE:
            current = self.state(target)
            if "IF NOT EXISTS" in " ".join(t.upper for t in parsed.tokens[:12]) and (
                current is not None
            ):
                if current is UNKNOWN:
                    raise DdlApplyError("CREATE TABLE IF NOT EXISTS of a table not tracked")
                return self._result(target)
            made = create_table(
                statement,
                target.schema,
                target.table,
                self._db_collation(target.schema),
                self._cs(),
            )
            self._set(at, target, made)
            return self._result(target)
        if kind is DdlKind.CREATE_TABLE_LIKE:
            assert parsed.like is not None
            source = self.state(parsed.like)
            if not isinstance(source, TableDef):
                raise DdlApplyError(f"CREATE TABLE LIKE of {parsed.like}, which is not tracked")
            self._set(at, target, source.copy(target.schema, target.table))
            return self._result(target)
        old = parsed.tables[0]
        state = self.state(old)
        if kind is DdlKind.TRUNCATE_TABLE:
            return self._result(target) if isinstance(state, TableDef) else DdlSchema(False)
        if not isinstance(state, TableDef):
            raise DdlApplyError(f"{old} is not tracked")
        if kind is DdlKind.CREATE_INDEX:
            self._set(at, old, create_index(statement, state))
        elif kind is DdlKind.DROP_INDEX:
            self._set(at, old, drop_index(statement, state))
        else:
            altered, _new = alter_table(statement, state, self._cs())
            if parsed.renames:
                new = parsed.renames[-1][1]
                self._set(at, old, None)
                self._set(at, new, altered.copy(new.schema, new.table))
            else:
                self._set(at, old, altered)
        return self._result(target)

    def _result(self, name: TableName | None) -> DdlSchema:
        if name is None:
            return DdlSchema(True)
        state = self.state(name)
        if state is UNKNOWN:
            return DdlSchema(False)
        return DdlSchema(True, state.schema_of() if isinstance(state, TableDef) else None)
