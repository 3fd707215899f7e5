"""DDL text for shard coordination: retarget a shard's statement, normalise it, classify it.

Shards of one group report the "same" DDL in different spellings: their own table name,
other whitespace, keywords in another case, comments. `retarget` rewrites the table a statement
names into the target table (keeping everything else byte for byte, so the statement executed
downstream is the one the shard ran); `normalize` turns a retargeted statement into the key
statements are compared by (unquoted words upper-cased, identifiers unquoted when simple, one
space between tokens, none around punctuation, comments dropped; string literals untouched).

`compatible` says whether a statement may use optimistic mode: ``ADD COLUMN`` that is nullable or
has a default, or ``MODIFY``/``CHANGE`` that widens a column whose previous type is known.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rowbus.protocol.ddl import DdlKind, DdlParseError, TableName, normalize, parse_ddl, quote
from rowbus.protocol.ddl import retarget as retarget_all
from rowbus.shard_ddl.exceptions import DdlTextError

__all__ = ["compatible", "coordinated", "normalize", "quote", "retarget", "widens"]

_COORDINATED = (DdlKind.ALTER_TABLE, DdlKind.CREATE_INDEX, DdlKind.DROP_INDEX)


def coordinated(statement: str) -> bool:
    """Whether `statement` is a DDL shard coordination handles (ALTER TABLE, CREATE/DROP INDEX)."""
    try:
        parsed = parse_ddl(statement, "")
    except DdlParseError:
        return False
    return parsed.kind in _COORDINATED and not parsed.renames


def retarget(statement: str, schema: str, table: str) -> str:
    """`statement` with the table it names replaced by `schema`.`table` (DdlTextError if it is
    not a coordinated DDL)."""
    try:
        parsed = parse_ddl(statement, "")
    except DdlParseError as exc:
        raise DdlTextError(f"{exc}: {statement[:60]}") from exc
    if parsed.kind not in _COORDINATED:
        raise DdlTextError(
            f"only ALTER TABLE and CREATE/DROP INDEX are coordinated: {statement[:40]!r}"
        )
    return retarget_all(parsed, lambda _name: TableName(schema, table))


# --- optimistic mode: which statements are compatible ---------------------------------------

_INT_RANK = {"TINYINT": 1, "SMALLINT": 2, "MEDIUMINT": 3, "INT": 4, "INTEGER": 4, "BIGINT": 5}
_ADD = re.compile(r"^ALTER TABLE \S+ ADD (?:COLUMN )?(?:IF NOT EXISTS )?(?P<col>\S+) (?P<rest>.*)$")
_MODIFY = re.compile(
    r"^ALTER TABLE \S+ (?:MODIFY (?:COLUMN )?(?:IF EXISTS )?(?P<m>\S+)"
    r"|CHANGE (?:COLUMN )?(?:IF EXISTS )?(?P<old>\S+) (?P<new>\S+)) (?P<type>.*)$"
)
_NOT_COLUMNS = {"INDEX", "KEY", "UNIQUE", "PRIMARY", "CONSTRAINT", "FULLTEXT", "SPATIAL", "FOREIGN"}
_TYPE = re.compile(r"^(?P<base>[A-Z]+)(?: ?\((?P<args>[0-9, ]+)\))?(?P<unsigned> UNSIGNED)?")


def _type_key(text: str) -> tuple[str, tuple[int, ...], bool] | None:
    m = _TYPE.match(text.upper())
    if not m:
        return None
    args = tuple(int(a) for a in (m.group("args") or "").replace(" ", "").split(",") if a)
    return m.group("base"), args, bool(m.group("unsigned"))


def widens(old: str, new: str) -> bool:
    """Whether column type `new` holds every value of `old` (integers, VARCHAR/CHAR, DECIMAL)."""
    a, b = _type_key(old), _type_key(new)
    if a is None or b is None or a[2] != b[2]:
        return False
    (base_a, args_a, _), (base_b, args_b, _) = a, b
    if base_a in _INT_RANK and base_b in _INT_RANK:
        return _INT_RANK[base_b] >= _INT_RANK[base_a]
    if base_a in ("VARCHAR", "CHAR") and base_b == "VARCHAR" and args_a and args_b:
        return args_b[0] >= args_a[0]
    if base_a == base_b == "DECIMAL" and len(args_a) == len(args_b) == 2:
        p_a, s_a = args_a
        p_b, s_b = args_b
        return s_b >= s_a and p_b - s_b >= p_a - s_a
    return False


def compatible(normalized: str, column_types: Mapping[str, str] | None = None) -> bool:
    """Whether the normalised statement is safe for optimistic mode.

    ``ADD COLUMN`` qualifies when it is nullable or has a DEFAULT (rows of other shards, which
    lack the column, still insert); ``MODIFY``/``CHANGE`` (same name) qualifies when
    `column_types` (upper-case column name → the column's type before the statement, e.g.
    ``INT``) shows that the new type widens the old one. A statement with several clauses never
    qualifies.
    """
    body = normalized.split(" COMMENT ", maxsplit=1)[0]
    if "," in re.sub(r"\([^)]*\)", "", body):
        return False
    m = _ADD.match(normalized)
    if m:
        if m.group("col") in _NOT_COLUMNS:
            return False
        rest = m.group("rest")
        return "NOT NULL" not in rest or " DEFAULT " in f" {rest} "
    m = _MODIFY.match(normalized)
    if m and column_types is not None:
        col = m.group("m") or m.group("old")
        if m.group("new") and m.group("new") != col:
            return False
        old = column_types.get(col.strip("`").upper())
        return old is not None and widens(old, m.group("type"))
    return False
