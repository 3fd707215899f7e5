# ruff: noqa: RUF001, RUF002 - look-alike characters are this module's subject
"""The key the sink sees: a skeleton of key literals under the sink's collations (pure).

Two key values the sink's collation calls equal are one row there: 'c' and 'C' under a ``_ci``
collation, 'a' and 'a ' under any PAD SPACE one (``utf8mb4_bin`` included), 'é' and 'e',
'ß' and 's' (``utf8mb4_general_ci``) or 'ss' (``utf8mb4_unicode_ci``). Collapse, causality and
the shards of parallel mode must treat them as one key, or two shards write one row in any
order (issue 31: parallel mode lost rows without an error). `sink_key` maps a key to its
skeleton: **values the sink's collation calls equal have equal skeletons**. The converse is
not needed: two keys with one skeleton only share a shard (or a causality group), which costs
parallelism, never a row; so every fold here is deliberately coarse.

Whose collation: the sink's, column by column (`fold_of` of ``information_schema.COLUMNS``'
``COLLATION_NAME`` of the target), not the source's — the rows are one row *there*, and a route
may land a ``_bin`` source column in a ``_ci`` sink column. Why not one fold for every
collation: it would be constant. Under ``utf8mb4_general_ci`` every character outside the BMP
is one (``'𝐀' = '𝐁'``), under ``utf8mb4_unicode_520_ci`` ``'𝐀' = 'a'`` and ``'𝐁' = 'b'``; a
function respecting both maps 'a' and 'b' to one skeleton (checked against MariaDB 10.11,
`tests/integration/spark_apply/test_keys.py`). So the folds differ only where collations that
old and that new disagree — characters outside the BMP — and one text fold serves every other
collation (general, unicode, 520, uca1400, latin1_swedish …). A column the sink does not
describe (the table is not there yet) gets `Fold.TEXT`.

The text fold, and why each step: lower case (``_ci``); NFKD with combining marks, controls and
format characters dropped (accent-insensitive; full width 'Ａ' and ligatures 'ﬁ' are their
letters in the UCA collations; unicode_ci ignores controls); a few letters no decomposition
reaches (ı, ø, đ, ð, ħ, ł, æ → ae, œ → oe: general_ci and 520 fold them); trailing spaces
dropped (PAD SPACE). Then what several collations force together: a run of 's' is one 's' (ß is
's' to general_ci and 'ss' to unicode_ci, so 's' and 'ss' must meet), 'a' absorbs the 'e's after
it (latin1_swedish_ci: Ä = Æ; unicode_ci: Ä = A; unicode_520_ci: Æ = AE), 'y' is 'u'
(latin1_swedish_ci: Ü = Y; elsewhere Ü = U), and '[', '\\', ']' are 'a', 'a', 'o'
(latin1_swedish_ci sorts Å, Ä, Ö as the ISO 646 Swedish letters at those codes).

Cost per key (`timeit`, CPU time, this 2-core machine under load; ``sink_key`` of a one-column
key, call included): 0.2 µs exact, 0.65 µs a short ASCII string (`str.isascii` fast path:
`lower`, one `replace`, nothing else unless a control or a bracket is there), ~1 µs with a run
of 's' or an escape, ~1.7 µs non-ASCII (per-character folds cached). Collapse skips it for
keys whose columns are all exact (numbers, dates): the usual integer key pays nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from enum import Enum


class Fold(Enum):
    """How the sink compares one key column's values."""

    EXACT = "exact"
    """Byte for byte: no collation (numbers, temporal and binary values), or a NO PAD binary
    collation."""
    PAD = "pad"
    """A PAD SPACE binary collation (``utf8mb4_bin``, ``latin1_bin``): trailing spaces do not
    count."""
    TEXT = "text"
    """Any other collation of UCA before 5.2 (general, unicode_ci, 8-bit ones): characters
    outside the BMP are all one."""
    TEXT_UCA = "text_uca"
    """UCA 5.2 and later (``unicode_520``, ``uca1400``, MySQL's ``0900``): characters outside
    the BMP fold like the others (``'𝐀' = 'a'``)."""


def fold_of(collation: str | None) -> Fold:
    """The fold of a sink column from its ``COLLATION_NAME`` (None: not a text column)."""
    if collation is None:
        return Fold.EXACT
    name = collation.lower()
    if name == "binary" or name.endswith("_nopad_bin"):
        return Fold.EXACT
    if name.endswith("_bin"):
        return Fold.PAD
    if "_520_" in name or "uca1400" in name or "_0900_" in name:
        return Fold.TEXT_UCA
    return Fold.TEXT


def sink_key(key: Sequence[str], folds: Sequence[Fold]) -> tuple[str, ...]:
    """The skeleton of `key` (SQL literals, as collapse holds them) under the `folds` of its
    columns; a column without a fold in `folds` (a shorter tuple) gets `Fold.TEXT`."""
    if len(key) == 1:  # the usual key: one column
        return (skeleton(key[0], folds[0] if folds else Fold.TEXT),)
    n = len(folds)
    return tuple([skeleton(v, folds[i] if i < n else Fold.TEXT) for i, v in enumerate(key)])


def skeleton(literal: str, fold: Fold) -> str:
    """The skeleton of one SQL literal under `fold`: a quoted string's text folded, anything
    else (numbers, NULL, hex bytes) as it is — text reaches the sink as quoted strings."""
    if fold is Fold.EXACT or not literal.startswith("'") or len(literal) < 2:
        return literal
    body = literal[1:-1]
    if "\\" in body:
        body = _ESCAPE.sub(_unescape, body)
    if fold is Fold.PAD:
        return "'" + body.rstrip(" ")
    if body.isascii():
        body = _ascii(body)
    else:
        chars = _CHARS_UCA if fold is Fold.TEXT_UCA else _CHARS
        body = "".join([chars[c] for c in body])
    body = body.rstrip(" ")
    if "ss" in body:
        body = _S_RUN.sub("s", body)
    if "ae" in body:
        body = _AE_RUN.sub("a", body)
    return "'" + body


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPED = {"0": "\0", "n": "\n", "r": "\r", "Z": "\x1a", "b": "\b", "t": "\t"}


def _unescape(m: re.Match[str]) -> str:
    c = m.group(1)
    return _UNESCAPED.get(c, c)


_S_RUN = re.compile("s+")
_AE_RUN = re.compile("ae+")

_CONTROLS = str.maketrans(dict.fromkeys((*map(chr, range(32)), "\x7f")))
"""ASCII controls, which unicode_ci ignores."""
_SWEDISH = str.maketrans("[\\]", "aao")
"""latin1_swedish_ci's Å, Ä, Ö at the ISO 646 Swedish codes (module docstring)."""


def _ascii(text: str) -> str:
    """The text fold of ASCII text but for trailing spaces and runs: lower case, controls
    dropped, latin1_swedish_ci's equalities. Each step is skipped when it has nothing to do:
    this is the per-key cost of most text keys (`str.translate` costs ~0.4 µs even then)."""
    if not text.isprintable():
        text = text.translate(_CONTROLS)
    text = text.lower().replace("y", "u")
    if "[" in text or "\\" in text or "]" in text:
        text = text.translate(_SWEDISH)
    return text


_LETTERS = {
    "ı": "i",
    "ø": "o",
    "đ": "d",
    "ð": "d",
    "ħ": "h",
    "ł": "l",
    "ŀ": "l",
    "\u00b7": "",  # NFKD makes ŀ 'l·'
    "æ": "ae",
    "œ": "oe",
}
"""Letters no decomposition reaches that some collation folds (after lower case)."""

_DROPPED = frozenset({"Mn", "Mc", "Me", "Cc", "Cf"})


def _fold_char(c: str, uca: bool) -> str:
    if ord(c) > 0xFFFF and not uca:
        return "\ufffd"
    out = []
    for x in unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", c).casefold()):
        if unicodedata.category(x) in _DROPPED:
            continue
        out.append("\ufffd" if ord(x) > 0xFFFF else _LETTERS.get(x, x))
    return _ascii("".join(out))


class _Chars(dict[str, str]):
    """Each character's fold, computed once."""

    def __init__(self, uca: bool) -> None:
        super().__init__()
        self._uca = uca

    def __missing__(self, c: str) -> str:
        found = self[c] = _fold_char(c, self._uca)
        return found


_CHARS = _Chars(uca=False)
_CHARS_UCA = _Chars(uca=True)
