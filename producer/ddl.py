"""What a DDL statement touches: a small parser for the table a statement names.

Only the statement head is read (``ALTER TABLE [IF EXISTS] [db.]t``, ``CREATE TABLE``, ``DROP
TABLE``, ``RENAME TABLE a TO b``, ``TRUNCATE [TABLE]``, ``CREATE/DROP INDEX … ON t``); anything
else (``CREATE DATABASE``, ``GRANT``…) touches no single table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = r"(?:`(?P<{0}q>(?:[^`]|``)+)`|(?P<{0}p>[A-Za-z0-9_$]+))"
_QUAL = rf"(?:{_NAME.format('s')}\s*\.\s*)?{_NAME.format('t')}"
_COMMENT = re.compile(r"/\*.*?\*/|--[^\n]*\n|#[^\n]*\n", re.S)
_PATTERNS = [
    (
        "alter",
        re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?{_QUAL}", re.I),
    ),
    (
        "create",
        re.compile(
            rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_QUAL}",
            re.I,
        ),
    ),
    ("drop", re.compile(rf"^DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QUAL}", re.I)),
    ("rename", re.compile(rf"^RENAME\s+TABLES?\s+{_QUAL}", re.I)),
    ("truncate", re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?{_QUAL}", re.I)),
    (
        "index",
        re.compile(
            rf"^(?:CREATE|DROP)\s+(?:ONLINE\s+|UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)*INDEX\s+"
            rf"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?\S+\s+ON\s+{_QUAL}",
            re.I,
        ),
    ),
]
_RENAME_TO = re.compile(rf"\s+TO\s+{_QUAL}", re.I)


@dataclass(frozen=True, slots=True)
class DdlTarget:
    """The table a DDL touches; `schema` falls back to the statement's default database.
    For RENAME, `table` is the new name (whose schema exists after the statement)."""

    kind: str
    schema: str
    table: str
    dropped: bool


def _name(m: re.Match[str], group: str) -> str | None:
    quoted = m.group(f"{group}q")
    return quoted.replace("``", "`") if quoted is not None else m.group(f"{group}p")


def parse_ddl(statement: str, default_schema: str) -> DdlTarget | None:
    """The table `statement` touches, or None if it names no single table."""
    text = _COMMENT.sub(" ", statement + "\n").strip()
    for kind, pattern in _PATTERNS:
        m = pattern.match(text)
        if m is None:
            continue
        schema = _name(m, "s") or default_schema
        table = _name(m, "t")
        if table is None:
            return None
        if kind == "rename":
            to = _RENAME_TO.match(text, m.end())
            if to is not None:
                schema = _name(to, "s") or default_schema
                table = _name(to, "t") or table
        return DdlTarget(kind, schema, str(table), dropped=kind == "drop")
    return None


def is_transaction_control(statement: str) -> str | None:
    """``BEGIN``, ``COMMIT``, ``ROLLBACK`` or ``XA`` for a transaction-control query, else None."""
    head = statement.lstrip()[:12].upper()
    for word in ("BEGIN", "COMMIT", "ROLLBACK", "XA "):
        if head.startswith(word):
            return word.strip()
    return None
