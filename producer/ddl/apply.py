"""What a DDL statement does to a table schema: the body of CREATE TABLE and ALTER TABLE.

`rowbus.protocol.ddl` classifies a statement and names its tables; this module (with
`rowbus.producer.ddl.columns` for column definitions, `ddl_types`, `ddl_defaults` and `ddl_words`)
reads the rest with the same tokenizer and applies it to a `TableDef`, the state a schema tracker
keeps per table: its columns (as the binlog's table map describes them, plus each column's DEFAULT
as MariaDB's information_schema shows it), its explicit primary key, its secondary indexes in
definition order and its default collation.

Pure text work, no I/O: the server facts it needs (each charset's default collation) come in
`Charsets`. Anything it does not model raises `DdlApplyError` — the caller then falls back to
what the binlog and the live server say — never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rowbus.producer.ddl.columns import ColumnDef, column_def, index_options, key_columns
from rowbus.producer.ddl.defaults import default_text, literal
from rowbus.producer.ddl.types import CHARACTER_TYPES, MBMAX, TEXT_BYTES, text_for
from rowbus.producer.ddl.words import (
    Charsets,
    DdlApplyError,
    Words,
    canon_charset,
    charset_of_collation,
)
from rowbus.protocol.ddl import tokenize
from rowbus.protocol.events import ColumnSchema, IndexSchema, TableSchema

__all__ = ["Charsets", "DdlApplyError", "TableDef", "alter_table", "create_table", "layout"]


@dataclass
class TableDef:
    """A table as a tracker keeps it. `columns` carry table-map forms; `primary` is the explicit
    primary key; `indexes` the secondary ones in definition order (name -> (columns, unique))."""

    schema: str
    table: str
    columns: list[ColumnSchema]
    primary: list[str]
    indexes: dict[str, tuple[list[str], bool]]
    collation: str
    """The table's default collation (its charset is the collation's)."""

    def copy(self, schema: str | None = None, table: str | None = None) -> TableDef:
        return TableDef(
            schema if schema is not None else self.schema,
            table if table is not None else self.table,
            list(self.columns),
            list(self.primary),
            {k: (list(c), u) for k, (c, u) in self.indexes.items()},
            self.collation,
        )

    def schema_of(self) -> TableSchema:
        """The protocol schema: the primary key is the explicit one, or (as MariaDB's table
        map reports it) the first UNIQUE index whose columns are all NOT NULL."""
        primary = tuple(self.primary)
        if not primary:
            nullable = {c.name: c.nullable for c in self.columns}
            for cols, unique in self.indexes.values():
                if unique and cols and not any(nullable.get(c, True) for c in cols):
                    primary = tuple(cols)
                    break
        indexes = tuple(IndexSchema(n, tuple(c), u) for n, (c, u) in sorted(self.indexes.items()))
        return TableSchema(self.schema, self.table, tuple(self.columns), primary, indexes)

    @staticmethod
    def of(table: TableSchema, collation: str) -> TableDef:
        """A tracker state from a published schema (or a table map). A primary key that is a
        UNIQUE index's columns is taken as that index promoted, else as explicit."""
        promoted = any(i.unique and i.columns == table.primary_key for i in table.indexes)
        return TableDef(
            table.schema,
            table.table,
            list(table.columns),
            [] if promoted else list(table.primary_key),
            {i.name: (list(i.columns), i.unique) for i in table.indexes},
            collation,
        )

    def column(self, name: str) -> int:
        for i, c in enumerate(self.columns):
            if c.name.lower() == name.lower():
                return i
        raise DdlApplyError(f"no column {name} in {self.schema}.{self.table}")


def _fresh_index_name(table: TableDef, first: str) -> str:
    taken = {n.lower() for n in table.indexes} | {"primary"}
    if first.lower() not in taken:
        return first
    for i in range(2, 10_000):
        if f"{first}_{i}".lower() not in taken:
            return f"{first}_{i}"
    raise DdlApplyError("no free index name")


def _add_index(table: TableDef, name: str | None, cols: list[str], unique: bool) -> None:
    for c in cols:
        table.column(c)
    canon = [table.columns[table.column(c)].name for c in cols]
    if name is not None and name.lower() in {n.lower() for n in table.indexes}:
        raise DdlApplyError(f"duplicate index {name}")
    table.indexes[name or _fresh_index_name(table, canon[0])] = (canon, unique)


def _set_primary(table: TableDef, cols: list[str]) -> None:
    if table.primary:
        raise DdlApplyError("a second primary key")
    canon = [table.columns[table.column(c)].name for c in cols]
    table.primary = canon
    for c in canon:
        i = table.column(c)
        col = table.columns[i]
        if col.nullable:
            table.columns[i] = replace(
                col, nullable=False, default=None if col.default == "NULL" else col.default
            )


def _constraint_key(w: Words, table: TableDef) -> bool:
    """PRIMARY KEY / UNIQUE / INDEX / KEY / FULLTEXT / SPATIAL / FOREIGN KEY / CHECK at the
    cursor (after an optional CONSTRAINT [name]); False when the cursor is a column."""
    start = w.k
    symbol: str | None = None
    if w.accept("CONSTRAINT") and w.at() not in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
        symbol = w.name()
    word = w.at()
    if word == "PRIMARY" and w.at(1) == "KEY":
        w.k += 2
        if w.accept("USING"):
            w.take()
        _set_primary(table, key_columns(w))
        index_options(w)
        return True
    if word in ("UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL"):
        w.take()
        unique = word == "UNIQUE"
        if word in ("UNIQUE", "FULLTEXT", "SPATIAL"):
            w.accept("INDEX", "KEY")
        w.accept_seq("IF", "NOT", "EXISTS")
        name = None if w.at() in ("(", "USING") else w.name()
        if w.accept("USING"):
            w.take()
        _add_index(table, name or symbol, key_columns(w), unique)
        index_options(w)
        return True
    if word == "FOREIGN":
        raise DdlApplyError("foreign keys (and the index they create) are not modelled")
    if word == "CHECK":
        w.take()
        w.skip_group()
        return True
    if word == "PERIOD":
        raise DdlApplyError("PERIOD FOR is not modelled")
    w.k = start
    return False


def _place(table: TableDef, cdef: ColumnDef, at: int | None) -> None:
    """Insert `cdef`'s column at its FIRST/AFTER position, or at `at` (None: the end)."""
    if cdef.position is not None:
        where, after = cdef.position
        at = 0 if where == "first" else table.column(after or "") + 1
    elif at is None:
        at = len(table.columns)
    table.columns.insert(at, cdef.column)
    _column_keys(table, cdef)


def _column_keys(table: TableDef, cdef: ColumnDef) -> None:
    name = cdef.column.name
    if cdef.primary:
        _set_primary(table, [name])
    if cdef.unique:
        _add_index(table, None, [name], True)
    if cdef.key and not cdef.primary:
        # `c INT KEY` is a primary key in MySQL's grammar.
        _set_primary(table, [name])


# ---- table options ----------------------------------------------------------------------------


def _table_charset(w: Words) -> tuple[str | None, str | None]:
    """[DEFAULT] CHARACTER SET|CHARSET [=] x / [DEFAULT] COLLATE [=] y at the cursor."""
    w.accept("DEFAULT")
    word = w.take().upper
    if word == "CHARACTER":
        w.expect("SET")
        word = "CHARSET"
    w.accept("=")
    value = w.name().lower()
    return (canon_charset(value), None) if word == "CHARSET" else (None, value)


def _resolve(charset: str | None, collation: str | None, charsets: Charsets) -> str | None:
    if collation is not None:
        return collation
    if charset is not None:
        return charsets.collation_of(charset)
    return None


def _table_options(w: Words, charsets: Charsets) -> str | None:
    """Skip table options; the default collation they set (None: not set)."""
    charset: str | None = None
    collation: str | None = None
    while not w.done:
        word = w.at()
        if word in ("CHARACTER", "CHARSET", "COLLATE") or (
            word == "DEFAULT" and w.at(1) in ("CHARACTER", "CHARSET", "COLLATE")
        ):
            cs, coll = _table_charset(w)
            charset, collation = cs or charset, coll or collation
        elif word in ("SELECT", "AS", "IGNORE", "REPLACE", "(", "WITH", "VALUES", "TABLE"):
            raise DdlApplyError("CREATE TABLE … SELECT is not modelled")
        elif word == "PARTITION":
            break
        elif word == "UNION":
            w.take()
            w.accept("=")
            w.skip_group()
        else:
            w.take()  # an option word, ``=`` or a single-token value
    return _resolve(charset, collation, charsets)


# ---- statements -------------------------------------------------------------------------------


def _after_name(statement: str, head: tuple[str, ...]) -> Words:
    """Words of `statement` after its head words and the (possibly qualified) table name."""
    w = Words(tokenize(statement))
    while w.at() in head or w.at() in (
        "IF",
        "NOT",
        "EXISTS",
        "OR",
        "REPLACE",
        "TEMPORARY",
        "ONLINE",
        "IGNORE",
    ):
        w.take()
    w.name()
    if w.at() == ".":
        w.take()
        w.name()
    return w


_KEY_WORDS = (
    "CONSTRAINT",
    "PRIMARY",
    "UNIQUE",
    "INDEX",
    "KEY",
    "FULLTEXT",
    "SPATIAL",
    "FOREIGN",
    "CHECK",
    "PERIOD",
)


def create_table(
    statement: str, schema: str, table: str, database_collation: str, charsets: Charsets
) -> TableDef:
    """The table a CREATE TABLE statement (with column definitions) creates."""
    w = _after_name(statement, ("CREATE", "TABLE"))
    w.expect("(")
    pending: list[ColumnDef] = []
    body_start = w.k
    # Table options come after the body but set the columns' default charset: read them first.
    w.k -= 1
    w.skip_group()
    collation = _table_options(w, charsets) or database_collation
    w.k = body_start
    out = TableDef(schema, table, [], [], {}, collation)
    keys: list[int] = []
    while True:
        at = w.k
        if w.at() in _KEY_WORDS:
            keys.append(at)  # applied once every column is known
            w.skip_to_spec_end()
        else:
            name = w.name()
            cdef = column_def(w, name, collation, charsets)
            cdef.position = None
            pending.append(cdef)
            out.columns.append(cdef.column)
        if not w.accept(","):
            break
    w.expect(")")
    for cdef in pending:
        _column_keys(out, cdef)
    end = w.k
    for at in keys:
        w.k = at
        if not _constraint_key(w, out):
            raise DdlApplyError("a table constraint not understood")
    w.k = end
    return out


def alter_table(statement: str, table: TableDef, charsets: Charsets) -> tuple[TableDef, str | None]:
    """`table` after an ALTER TABLE statement, and its new name when it renames the table."""
    w = _after_name(statement, ("ALTER", "TABLE"))
    out = table.copy()
    new_name: str | None = None
    while not w.done:
        new_name = _alter_spec(w, out, charsets) or new_name
        if not w.accept(","):
            break
    if not w.done:
        raise DdlApplyError(f"ALTER TABLE clause {w.tok().text} is not modelled")
    return out, new_name


def _exists_flag(w: Words, *words: str) -> bool:
    return w.accept_seq("IF", *words)


def _alter_add(w: Words, t: TableDef, charsets: Charsets) -> None:
    if w.at() == "PARTITION":
        raise DdlApplyError("ADD PARTITION is not modelled")
    if _constraint_key(w, t):
        return
    w.accept("COLUMN")
    if_not = _exists_flag(w, "NOT", "EXISTS")
    many = w.accept("(")
    while True:
        name = w.name()
        _add_column(t, column_def(w, name, t.collation, charsets), if_not)
        if not (many and w.accept(",")):
            break
    if many:
        w.expect(")")


def _alter_modify(w: Words, t: TableDef, charsets: Charsets, change: bool) -> None:
    w.accept("COLUMN")
    if_exists = _exists_flag(w, "EXISTS")
    old = w.name()
    new = w.name() if change else old
    cdef = column_def(w, new, t.collation, charsets)
    try:
        i = t.column(old)
    except DdlApplyError:
        if if_exists:
            return
        raise
    del t.columns[i]
    _rename_in_keys(t, old, new)
    _place(t, cdef, i if cdef.position is None else None)
    _keep_key_nullability(t, new)


def _alter_rename(w: Words, t: TableDef) -> str | None:
    if w.accept("COLUMN"):
        old = w.name()
        w.expect("TO")
        new = w.name()
        i = t.column(old)
        t.columns[i] = replace(t.columns[i], name=new)
        _rename_in_keys(t, old, new)
        return None
    if w.accept("INDEX", "KEY"):
        old = w.name()
        w.expect("TO")
        new = w.name()
        found = next((n for n in t.indexes if n.lower() == old.lower()), None)
        if found is None:
            raise DdlApplyError(f"no index {old}")
        t.indexes = {new if n == found else n: v for n, v in t.indexes.items()}
        return None
    w.accept("TO", "AS")
    name = w.name()
    if w.accept("."):
        name = w.name()
    return name


def _alter_column(w: Words, t: TableDef) -> None:
    w.accept("COLUMN")
    _exists_flag(w, "EXISTS")
    i = t.column(w.name())
    col = t.columns[i]
    if w.accept_seq("SET", "DEFAULT"):
        t.columns[i] = replace(col, default=default_text(col, *literal(w)))
    elif w.accept_seq("DROP", "DEFAULT"):
        # As the server shows it: a nullable column's default becomes NULL.
        t.columns[i] = replace(col, default="NULL" if col.nullable else None)
    else:
        raise DdlApplyError("ALTER COLUMN clause is not modelled")


def _alter_charset(w: Words, t: TableDef, charsets: Charsets, convert: bool) -> None:
    if convert:
        w.expect("TO")
    cs, coll = _table_charset(w)
    if w.at() == "COLLATE" or (w.at() == "DEFAULT" and w.at(1) == "COLLATE"):
        coll = _table_charset(w)[1]
    collation = _resolve(cs, coll, charsets)
    if collation is None:
        raise DdlApplyError("a charset clause without a charset")
    if convert:
        _convert(t, collation)
    else:
        t.collation = collation


_NO_OP_OPTIONS = (
    "ENGINE",
    "ALGORITHM",
    "LOCK",
    "AUTO_INCREMENT",
    "COMMENT",
    "ROW_FORMAT",
    "KEY_BLOCK_SIZE",
    "STATS_PERSISTENT",
    "STATS_AUTO_RECALC",
    "PAGE_COMPRESSED",
    "WAIT",
)


def _alter_spec(w: Words, t: TableDef, charsets: Charsets) -> str | None:
    """One clause of ALTER TABLE; the table's new name when it renames the table."""
    word = w.at()
    if word in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE"):
        _alter_charset(w, t, charsets, convert=False)
        return None
    w.take()
    if word == "ADD":
        _alter_add(w, t, charsets)
    elif word == "DROP":
        _drop(w, t)
    elif word in ("MODIFY", "CHANGE"):
        _alter_modify(w, t, charsets, change=word == "CHANGE")
    elif word == "RENAME":
        return _alter_rename(w, t)
    elif word == "ALTER":
        _alter_column(w, t)
    elif word == "CONVERT":
        _alter_charset(w, t, charsets, convert=True)
    elif word in _NO_OP_OPTIONS:
        w.accept("=")
        w.take()
    elif word in ("FORCE", "ENABLE", "DISABLE", "NOWAIT"):
        w.accept("KEYS")
    elif word == "ORDER":
        w.expect("BY")
        w.skip_to_spec_end()
    else:
        raise DdlApplyError(f"ALTER TABLE {word} is not modelled")
    return None


def _add_column(t: TableDef, cdef: ColumnDef, if_not_exists: bool) -> None:
    if any(c.name.lower() == cdef.column.name.lower() for c in t.columns):
        if if_not_exists:
            return
        raise DdlApplyError(f"column {cdef.column.name} exists")
    _place(t, cdef, None)


def _keep_key_nullability(t: TableDef, name: str) -> None:
    """A primary-key column stays NOT NULL whatever MODIFY says."""
    if any(c.lower() == name.lower() for c in t.primary):
        i = t.column(name)
        col = t.columns[i]
        if col.nullable:
            t.columns[i] = replace(
                col, nullable=False, default=None if col.default == "NULL" else col.default
            )


def _rename_in_keys(t: TableDef, old: str, new: str) -> None:
    def ren(cols: list[str]) -> list[str]:
        return [new if c.lower() == old.lower() else c for c in cols]

    t.primary = ren(t.primary)
    t.indexes = {n: (ren(c), u) for n, (c, u) in t.indexes.items()}


def _drop(w: Words, t: TableDef) -> None:
    if w.accept_seq("PRIMARY", "KEY"):
        if not t.primary:
            raise DdlApplyError("DROP PRIMARY KEY of a table without one")
        t.primary = []
        return
    if w.accept("INDEX", "KEY"):
        if_exists = _exists_flag(w, "EXISTS")
        name = w.name()
        found = next((n for n in t.indexes if n.lower() == name.lower()), None)
        if found is None:
            if if_exists:
                return
            raise DdlApplyError(f"no index {name}")
        del t.indexes[found]
        return
    if w.at() in ("FOREIGN", "CONSTRAINT", "CHECK", "PARTITION"):
        raise DdlApplyError(f"DROP {w.at()} is not modelled")
    w.accept("COLUMN")
    if_exists = _exists_flag(w, "EXISTS")
    name = w.name()
    try:
        i = t.column(name)
    except DdlApplyError:
        if if_exists:
            return
        raise
    real = t.columns[i].name
    del t.columns[i]
    # As the server does: the column leaves every key; a key left without columns goes.
    t.primary = [c for c in t.primary if c.lower() != real.lower()]
    kept: dict[str, tuple[list[str], bool]] = {}
    for n, (cols, unique) in t.indexes.items():
        rest = [c for c in cols if c.lower() != real.lower()]
        if rest:
            kept[n] = (rest, unique)
    t.indexes = kept


def _convert(t: TableDef, collation: str) -> None:
    """CONVERT TO CHARACTER SET: every character column takes the collation; a TEXT column
    grows to the smallest TEXT type that holds as many characters as before."""
    charset = charset_of_collation(collation)
    t.collation = collation
    for i, col in enumerate(t.columns):
        if col.charset is None or col.type not in CHARACTER_TYPES:
            continue
        name = col.type
        if name.endswith("text"):
            size = name[: -len("text")]
            limit = dict(TEXT_BYTES)[size]
            chars = limit // MBMAX.get(col.charset, 1)
            need = chars * MBMAX.get(charset, 1)
            name = text_for(need)
        t.columns[i] = replace(col, type=name, charset=charset, collation=collation)


def create_index(statement: str, table: TableDef) -> TableDef:
    """CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX name ON t (cols)."""
    w = Words(tokenize(statement))
    w.expect("CREATE")
    w.accept_seq("OR", "REPLACE")
    w.accept("ONLINE", "OFFLINE")
    unique = w.accept("UNIQUE")
    w.accept("FULLTEXT", "SPATIAL")
    w.expect("INDEX")
    if_not = w.accept_seq("IF", "NOT", "EXISTS")
    name = w.name()
    while not w.done and w.at() != "ON":
        w.take()
    w.expect("ON")
    w.name()
    if w.accept("."):
        w.name()
    out = table.copy()
    if if_not and name.lower() in {n.lower() for n in out.indexes}:
        return out
    _add_index(out, name, key_columns(w), unique)
    return out


def drop_index(statement: str, table: TableDef) -> TableDef:
    """DROP INDEX name ON t."""
    w = Words(tokenize(statement))
    w.expect("DROP")
    w.accept("ONLINE", "OFFLINE")
    w.expect("INDEX")
    if_exists = w.accept_seq("IF", "EXISTS")
    name = w.name()
    out = table.copy()
    if name.upper() == "PRIMARY":
        out.primary = []
        return out
    found = next((n for n in out.indexes if n.lower() == name.lower()), None)
    if found is None:
        if if_exists:
            return out
        raise DdlApplyError(f"no index {name}")
    del out.indexes[found]
    return out


def like(source: TableDef, schema: str, table: str) -> TableDef:
    """CREATE TABLE … LIKE: the same definition under another name."""
    return source.copy(schema, table)


def layout(table: TableSchema) -> tuple[object, ...]:
    """What the binlog's table map confirms of a table: every column field but the default,
    and the primary key (a tracker checks its state against each table map with this)."""
    return (
        tuple(replace(c, default=None) for c in table.columns),
        table.primary_key,
    )
