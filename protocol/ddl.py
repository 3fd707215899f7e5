"""The one DDL parser: classify a statement, name the tables it touches, retarget it.

Pure text work, no I/O, so the reader (which DDL kind and tables to publish), the apply sink
(which target tables a statement must be rewritten to) and shard-DDL coordination (retarget,
normalise) all read statements the same way. Only statement heads and table positions are
parsed — never column definitions: what a statement does to a table's columns is told by the
table schema the reader publishes after it.

`parse_ddl` tokenizes the statement (whitespace and comments kept as tokens, so that
`retarget` rewrites table names and leaves every other byte as the source ran it) and returns a
`ParsedDdl`: its `DdlKind`, every table name with its token span, renames, the LIKE source, the
database of a database statement. Unqualified names take the statement's default database.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class DdlKind(Enum):
    """What a DDL statement does. Its value is the wire form of `DdlChange.kind`."""

    CREATE_TABLE = "create_table"
    CREATE_TABLE_LIKE = "create_table_like"
    ALTER_TABLE = "alter_table"
    TRUNCATE_TABLE = "truncate_table"
    RENAME_TABLE = "rename_table"
    DROP_TABLE = "drop_table"
    CREATE_INDEX = "create_index"
    DROP_INDEX = "drop_index"
    CREATE_DATABASE = "create_database"
    ALTER_DATABASE = "alter_database"
    DROP_DATABASE = "drop_database"
    OTHER = "other"
    """Views, triggers, routines, users, grants…: nothing that changes a table's rows or
    columns (a consumer may ignore it)."""


class DdlParseError(ValueError):
    """A statement whose head names a table kind but whose table names cannot be read."""


_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<comment>/\*.*?\*/|--[^\n]*|\#[^\n]*)
      | (?P<ident>`(?:[^`]|``)*`)
      | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      | (?P<word>[A-Za-z0-9_$]+)
      | (?P<punct>.)""",
    re.X | re.S,
)
_SIMPLE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_TIGHT = {"(", ")", ",", ".", ";"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str

    @property
    def name(self) -> str:
        """The identifier this token spells (backquotes removed), or its word."""
        if self.kind == "ident":
            return self.text[1:-1].replace("``", "`")
        return self.text

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else self.text


def tokenize(statement: str) -> list[Token]:
    """All tokens of `statement`, whitespace and comments included (their texts join back)."""
    return [Token(m.lastgroup or "punct", m.group()) for m in _TOKEN.finditer(statement)]


def quote(name: str) -> str:
    """A MySQL identifier in backquotes."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True, slots=True, order=True)
class TableName:
    schema: str
    table: str

    @property
    def quoted(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class ParsedDdl:
    """A classified statement.

    `tables`: every table it names, in statement order (for RENAME: old, new, old, new…; for
    CREATE … LIKE: the new table, then the source). `renames`: (old, new) pairs, from RENAME
    TABLE and from ALTER TABLE … RENAME [TO|AS]. `like`: the source of CREATE TABLE … LIKE.
    `database`: the database a CREATE/ALTER/DROP DATABASE names.
    """

    kind: DdlKind
    tables: tuple[TableName, ...] = ()
    renames: tuple[tuple[TableName, TableName], ...] = ()
    like: TableName | None = None
    database: str | None = None
    if_exists: bool = False
    temporary: bool = False
    column_renames: tuple[tuple[str, str], ...] = ()
    """(old, new) column names of ALTER TABLE … CHANGE [COLUMN] old new / RENAME COLUMN old TO
    new: what a consumer needs to keep the values of a renamed column (the table schema after
    the statement alone cannot tell a rename from a drop and an add)."""
    spans: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    """Token index ranges [first, last] of each name in `tables` (for `retarget`)."""
    tokens: tuple[Token, ...] = field(default=(), repr=False, compare=False)

    @property
    def table(self) -> TableName | None:
        """The table the statement is about, as it is after it: the first table named, or the
        new name of a single rename (None for database and other statements, or several
        tables dropped/renamed)."""
        if not self.tables:
            return None
        if self.renames:
            return self.renames[-1][1] if len(self.renames) == 1 else None
        if self.kind is DdlKind.DROP_TABLE and len(self.tables) > 1:
            return None
        return self.tables[0]

    @property
    def touched(self) -> tuple[TableName, ...]:
        """The tables whose state the statement changes (the LIKE source is only read)."""
        return tuple(t for t in dict.fromkeys(self.tables) if t != self.like)


class TokenCursor:
    """Walks the significant tokens (no spaces, no comments) of a statement.

    The one token cursor: this module's parser names tables with it, and the producer's DDL
    interpreter (`rowbus.producer.ddl.words.Words`) adds its readers of types and values on top.
    `sig` indexes `tokens`, so a reader can tell the span of what it read in the statement text.
    """

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.sig = [i for i, t in enumerate(tokens) if t.kind not in ("space", "comment")]
        self.k = 0

    def at(self, offset: int = 0) -> str:
        """The upper-cased text of the significant token `offset` on ("" past the end)."""
        j = self.k + offset
        return self.tokens[self.sig[j]].upper if j < len(self.sig) else ""

    def peek(self) -> Token | None:
        """The token at the cursor, None at the end."""
        return self.tokens[self.sig[self.k]] if self.k < len(self.sig) else None

    @property
    def ended(self) -> bool:
        return self.k >= len(self.sig)

    def accept(self, *words: str) -> bool:
        if self.at() in words:
            self.k += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        if all(self.at(i) == w for i, w in enumerate(words)):
            self.k += len(words)
            return True
        return False


class _Cursor(TokenCursor):
    """The parser's cursor: table and database names, with their spans in the statement."""

    def name(self, default_schema: str) -> tuple[TableName, tuple[int, int]]:
        """A possibly qualified name at the cursor."""
        sig, toks = self.sig, self.tokens
        if self.k >= len(sig) or toks[sig[self.k]].kind not in ("ident", "word"):
            raise DdlParseError("expected a table name")
        first = sig[self.k]
        if (
            self.k + 2 < len(sig)
            and toks[sig[self.k + 1]].text == "."
            and toks[sig[self.k + 2]].kind in ("ident", "word")
        ):
            last = sig[self.k + 2]
            name = TableName(toks[first].name, toks[last].name)
            self.k += 3
        else:
            last = first
            name = TableName(default_schema, toks[first].name)
            self.k += 1
        return name, (first, last)

    def database(self) -> str | None:
        sig, toks = self.sig, self.tokens
        if self.k < len(sig) and toks[sig[self.k]].kind in ("ident", "word"):
            return toks[sig[self.k]].name
        return None


class _Parser:
    def __init__(self, statement: str, default_schema: str) -> None:
        self.tokens = tokenize(statement)
        self.c = _Cursor(self.tokens)
        self.default = default_schema
        self.names: list[TableName] = []
        self.spans: list[tuple[int, int]] = []

    def take(self) -> TableName:
        n, span = self.c.name(self.default)
        self.names.append(n)
        self.spans.append(span)
        return n

    def done(self, kind: DdlKind, **kw: Any) -> ParsedDdl:
        return ParsedDdl(
            kind, tuple(self.names), spans=tuple(self.spans), tokens=tuple(self.tokens), **kw
        )

    def parse(self) -> ParsedDdl:
        head = self.c.at()
        self.c.k += 1
        step = {
            "CREATE": self.create,
            "DROP": self.drop,
            "RENAME": self.rename,
            "TRUNCATE": self.truncate,
            "ALTER": self.alter,
        }.get(head)
        return step() if step is not None else self.done(DdlKind.OTHER)

    def create(self) -> ParsedDdl:
        c = self.c
        c.accept_seq("OR", "REPLACE")
        if c.accept("DATABASE", "SCHEMA"):
            c.accept_seq("IF", "NOT", "EXISTS")
            return self.done(DdlKind.CREATE_DATABASE, database=c.database())
        temporary = c.accept("TEMPORARY")
        if c.accept("TABLE"):
            c.accept_seq("IF", "NOT", "EXISTS")
            self.take()
            c.accept("(")
            if c.accept("LIKE"):
                like = self.take()
                return self.done(DdlKind.CREATE_TABLE_LIKE, like=like, temporary=temporary)
            return self.done(DdlKind.CREATE_TABLE, temporary=temporary)
        while c.accept("ONLINE", "OFFLINE", "UNIQUE", "FULLTEXT", "SPATIAL"):
            pass
        if not c.accept("INDEX", "KEY"):
            return self.done(DdlKind.OTHER)
        c.accept_seq("IF", "NOT", "EXISTS")
        c.k += 1  # the index name
        while c.at() and c.at() != "ON":
            c.k += 1  # USING BTREE …
        if not c.accept("ON"):
            raise DdlParseError("CREATE INDEX without ON <table>")
        self.take()
        return self.done(DdlKind.CREATE_INDEX)

    def drop(self) -> ParsedDdl:
        c = self.c
        if c.accept("DATABASE", "SCHEMA"):
            if_exists = c.accept_seq("IF", "EXISTS")
            return self.done(DdlKind.DROP_DATABASE, database=c.database(), if_exists=if_exists)
        temporary = c.accept("TEMPORARY")
        if c.accept("TABLE", "TABLES"):
            if_exists = c.accept_seq("IF", "EXISTS")
            self.take()
            while c.accept(","):
                self.take()
            return self.done(DdlKind.DROP_TABLE, if_exists=if_exists, temporary=temporary)
        c.accept("ONLINE", "OFFLINE")
        if not c.accept("INDEX", "KEY"):
            return self.done(DdlKind.OTHER)
        if_exists = c.accept_seq("IF", "EXISTS")
        c.k += 1
        if not c.accept("ON"):
            raise DdlParseError("DROP INDEX without ON <table>")
        self.take()
        return self.done(DdlKind.DROP_INDEX, if_exists=if_exists)

    def rename(self) -> ParsedDdl:
        c = self.c
        if not c.accept("TABLE", "TABLES"):
            return self.done(DdlKind.OTHER)  # RENAME USER
        renames: list[tuple[TableName, TableName]] = []
        while True:
            c.accept_seq("IF", "EXISTS")
            old = self.take()
            if c.accept("WAIT"):
                c.k += 1  # WAIT n
            c.accept("NOWAIT")
            if not c.accept("TO"):
                raise DdlParseError("RENAME TABLE without TO")
            renames.append((old, self.take()))
            if not c.accept(","):
                break
        return self.done(DdlKind.RENAME_TABLE, renames=tuple(renames))

    def truncate(self) -> ParsedDdl:
        self.c.accept("TABLE")
        self.take()
        return self.done(DdlKind.TRUNCATE_TABLE)

    def alter(self) -> ParsedDdl:
        c = self.c
        while c.accept("ONLINE", "IGNORE"):
            pass
        if c.accept("DATABASE", "SCHEMA"):
            return self.done(DdlKind.ALTER_DATABASE, database=c.database() or self.default)
        if not c.accept("TABLE"):
            return self.done(DdlKind.OTHER)
        if_exists = c.accept_seq("IF", "EXISTS")
        old = self.take()
        renames: tuple[tuple[TableName, TableName], ...] = ()
        columns: list[tuple[str, str]] = []
        depth = 0
        while c.at():
            word = c.at()
            depth += {"(": 1, ")": -1}.get(word, 0)
            if (
                depth == 0
                and word in ("CHANGE", "RENAME")
                and (c.at(1) == "COLUMN" or word == "CHANGE")
            ):
                c.k += 1
                c.accept("COLUMN")
                c.accept_seq("IF", "EXISTS")
                before = c.database()
                c.k += 1
                c.accept("TO")
                after = c.database()
                if before is not None and after is not None and before != after:
                    columns.append((before, after))
                continue
            if depth == 0 and word == "RENAME" and c.at(1) not in ("INDEX", "KEY"):
                c.k += 1
                c.accept("TO", "AS")
                renames = ((old, self.take()),)
                continue
            c.k += 1
        return self.done(
            DdlKind.ALTER_TABLE,
            renames=renames,
            if_exists=if_exists,
            column_renames=tuple(columns),
        )


def parse_ddl(statement: str, default_schema: str) -> ParsedDdl:
    """Classify `statement`; DdlParseError if its head names tables it does not spell out."""
    return _Parser(statement, default_schema).parse()


_WRITES = ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD")
_REFS_END = ("SET", "WHERE", "ORDER", "LIMIT", "RETURNING", "VALUES", "SELECT")


def written_tables(statement: str, default_schema: str) -> tuple[TableName, ...] | None:
    """The tables a data-change statement (INSERT, REPLACE, UPDATE, DELETE, LOAD DATA) writes,
    as far as its text tells: every table of a multi-table UPDATE or DELETE (aliases may come
    along, so this is a superset). None: not a data change."""
    c = _Cursor(tokenize(statement))
    if c.at() == "WITH":  # a common table expression ahead of the data change
        depth = 0
        while c.at() and not (depth == 0 and c.at() in _WRITES):
            depth += {"(": 1, ")": -1}.get(c.at(), 0)
            c.k += 1
    head = c.at()
    if head not in _WRITES:
        return None
    c.k += 1
    names: list[TableName] = []

    def take() -> None:
        with contextlib.suppress(DdlParseError):
            names.append(c.name(default_schema)[0])

    while c.accept("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "QUICK", "IGNORE", "CONCURRENT"):
        pass
    if head in ("INSERT", "REPLACE"):
        c.accept("INTO")
        take()
    elif head == "LOAD":
        while c.at() and not c.accept_seq("INTO", "TABLE"):
            c.k += 1
        take()
    else:
        if c.at() != "FROM":
            take()
        depth = 0
        while c.at() and not (depth == 0 and c.at() in _REFS_END):
            word = c.at()
            depth += {"(": 1, ")": -1}.get(word, 0)
            c.k += 1
            if depth == 0 and word in (",", "JOIN", "FROM", "USING"):
                take()
    return tuple(dict.fromkeys(names))


def retarget(parsed: ParsedDdl, target_of: Callable[[TableName], TableName | None]) -> str:
    """The statement with every table name replaced by its target's qualified name.

    `target_of` maps an upstream table to its target (None: keep the name as written). The
    statement's other bytes stay as the source ran them (a trailing ``;`` is dropped)."""
    tokens = parsed.tokens
    out: list[str] = []
    pos = 0
    for name, (first, last) in zip(parsed.tables, parsed.spans, strict=True):
        out.extend(t.text for t in tokens[pos:first])
        target = target_of(name)
        if target is None:
            out.extend(t.text for t in tokens[first : last + 1])
        else:
            out.append(target.quoted)
        pos = last + 1
    out.extend(t.text for t in tokens[pos:])
    return "".join(out).strip().rstrip(";").rstrip()


def retarget_database(parsed: ParsedDdl, database: str) -> str:
    """A database statement with the database it names replaced by `database`."""
    tokens = parsed.tokens
    for i, tok in enumerate(tokens):
        if tok.kind in ("ident", "word") and tok.name == parsed.database:
            head = "".join(t.text for t in tokens[:i])
            tail = "".join(t.text for t in tokens[i + 1 :])
            return f"{head}{quote(database)}{tail}".strip().rstrip(";").rstrip()
    raise DdlParseError(f"no database named in {parsed.kind.value} statement")


def normalize(statement: str) -> str:
    """The comparison key of a statement: unquoted words upper-cased, identifiers unquoted when
    simple, one space between tokens, none around punctuation, comments dropped, string literals
    untouched."""
    out: list[str] = []
    for tok in tokenize(statement):
        if tok.kind in ("space", "comment"):
            continue
        if tok.kind == "ident":
            name = tok.name
            text = name.upper() if _SIMPLE.fullmatch(name) else tok.text
        elif tok.kind == "word":
            text = tok.text.upper()
        else:
            text = tok.text
        # `INT (11)` and `INT(11)` are one spelling: no space before punctuation or after ( .
        if out and text not in _TIGHT and out[-1] not in ("(", "."):
            out.append(" ")
        out.append(text)
    return "".join(out).rstrip(";").strip()
