"""Transaction-control statements of a binlog, classified (pure).

What MariaDB 10.11 writes in ROW format between a GTID event and the group's end (measured, see
PROTOCOL.md "Transaction shapes"): ``BEGIN`` (MySQL), ``SAVEPOINT `sp``` (only when changes
precede it), ``ROLLBACK TO `sp``` (only when the rolled-back part cannot be cut from the cache:
the rows events before it stay in the binlog and a replica undoes them by running the
statement), ``XA END xid`` before an ``XA_PREPARE_LOG_EVENT``, a standalone ``XA COMMIT xid`` /
``XA ROLLBACK xid`` group later, and ``COMMIT`` / ``ROLLBACK`` ends of non-transactional groups.
``RELEASE SAVEPOINT`` is not written by MariaDB, but MySQL and other servers may write it.
None of these is DDL.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class TxnControl(enum.Enum):
    BEGIN = "BEGIN"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    SAVEPOINT = "SAVEPOINT"
    ROLLBACK_TO = "ROLLBACK TO"
    RELEASE = "RELEASE SAVEPOINT"
    XA_START = "XA START"
    XA_END = "XA END"
    XA_PREPARE = "XA PREPARE"
    XA_COMMIT = "XA COMMIT"
    XA_COMMIT_ONE_PHASE = "XA COMMIT ONE PHASE"
    XA_ROLLBACK = "XA ROLLBACK"


@dataclass(frozen=True, slots=True)
class TxnControlStatement:
    kind: TxnControl
    name: str = ""
    """The savepoint name (lower case: names are case-insensitive) or the XA xid as written."""


_NAME = r"(`(?:[^`]|``)+`|[^\s;]+)"
_PATTERNS: list[tuple[re.Pattern[str], TxnControl]] = [
    (re.compile(r"\s*(?:BEGIN|START\s+TRANSACTION)\b", re.I), TxnControl.BEGIN),
    (re.compile(r"\s*COMMIT\b", re.I), TxnControl.COMMIT),
    (
        re.compile(r"\s*ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?" + _NAME, re.I),
        TxnControl.ROLLBACK_TO,
    ),
    (re.compile(r"\s*ROLLBACK\b", re.I), TxnControl.ROLLBACK),
    (re.compile(r"\s*SAVEPOINT\s+" + _NAME, re.I), TxnControl.SAVEPOINT),
    (re.compile(r"\s*RELEASE\s+SAVEPOINT\s+" + _NAME, re.I), TxnControl.RELEASE),
]
_XA = re.compile(
    r"\s*XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\s+(.*?)"
    r"(\s+(?:ONE\s+PHASE|JOIN|RESUME|SUSPEND(?:\s+FOR\s+MIGRATE)?))?\s*;?\s*$",
    re.I | re.S,
)
_XA_KIND = {
    "START": TxnControl.XA_START,
    "BEGIN": TxnControl.XA_START,
    "END": TxnControl.XA_END,
    "PREPARE": TxnControl.XA_PREPARE,
    "COMMIT": TxnControl.XA_COMMIT,
    "ROLLBACK": TxnControl.XA_ROLLBACK,
}


def _savepoint(raw: str) -> str:
    if raw.startswith("`") and raw.endswith("`"):
        raw = raw[1:-1].replace("``", "`")
    return raw.lower()


def xid_key(text: str) -> str:
    """An xid as a comparable key: MariaDB writes ``X'7831',X'',1`` in every statement."""
    return re.sub(r"\s+", "", text)


def classify(statement: str) -> TxnControlStatement | None:
    """The transaction-control statement `statement` is, or None (DDL or anything else)."""
    head = statement[:32].lstrip().upper()
    if head.startswith("XA"):
        m = _XA.match(statement)
        if m is None:
            return None
        kind = _XA_KIND[m.group(1).upper()]
        suffix = (m.group(3) or "").upper()
        if kind is TxnControl.XA_COMMIT and "ONE" in suffix:
            kind = TxnControl.XA_COMMIT_ONE_PHASE
        return TxnControlStatement(kind, xid_key(m.group(2)))
    if not head.startswith(("BEGIN", "START", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")):
        return None
    for pattern, kind in _PATTERNS:
        m = pattern.match(statement)
        if m is not None:
            name = _savepoint(m.group(1)) if m.groups() else ""
            return TxnControlStatement(kind, name)
    return None
