"""Which write task owns a sink row: a hash of its target and of its key as the sink compares it.

Pure. Two rows the sink holds as one must be written by one task in one step, or their
writes race in two transactions in any order (issue 31: under a ``_ci`` collation 'c' and 'C'
are one row; under PAD SPACE 'a' and 'a ' are). The sink's collations are not known here, so
a key is *folded* conservatively before hashing: string literals are case-folded, decomposed
(NFKD) without their combining marks, and stripped of trailing spaces. Folding only ever puts
more keys into one task (a ``_bin`` target's 'a' and 'A' then share an owner), which costs
nothing in correctness: ownership never decides identity, the sink does.

The hash is crc32, not Python's `hash` (salted per process): every executor, every attempt and
every replay must place a key in the same task.

Note for the lead: the collation work (a per-column key skeleton from the sink's collations)
was not on main when this was written; `fold` is the conservative stand-in and should give way
to it, and so should the owner of a target with secondary unique keys (see `owner`).
"""

from __future__ import annotations

import unicodedata
import zlib
from collections.abc import Sequence

_SEP = "\x1f"


def fold(literal_text: str) -> str:
    """A key literal as every collation the sink may have compares it, or coarser."""
    if len(literal_text) < 2 or literal_text[0] != "'" or literal_text[-1] != "'":
        return literal_text  # numbers, NULL, hex bytes: compared exactly
    inner = unicodedata.normalize("NFKD", literal_text[1:-1].casefold())
    bare = "".join(c for c in inner if not unicodedata.combining(c))
    return bare.rstrip(" ")


def owner(target: str, key: Sequence[str]) -> int:
    """The owner hash of a target's row by its key literals (an empty key: the whole table)."""
    text = target + _SEP + _SEP.join(fold(k) for k in key)
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))
