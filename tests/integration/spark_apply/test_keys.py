# ruff: noqa: RUF001, RUF002 - look-alike characters are this module's subject
"""The key the sink sees (`keys.sink_key`) against the real server: strings MariaDB's collations
call equal have equal skeletons under that collation's fold. Strings are drawn as variants of
one base (case, accents, ß/ss, ı/İ, full width, ligatures, trailing spaces and ignorables), so
most examples hold pairs the server calls equal."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rowbus.config import Settings
from rowbus.spark_apply.keys import fold_of, skeleton
from rowbus.spark_apply.literals import literal
from tests.conftest import connect

WANTED = [
    "utf8mb4_general_ci",
    "utf8mb4_unicode_ci",
    "utf8mb4_unicode_520_ci",
    "utf8mb4_uca1400_ai_ci",
    "utf8mb4_general_nopad_ci",
    "utf8mb4_bin",
    "utf8mb4_nopad_bin",
    "latin1_swedish_ci",
    "latin1_general_ci",
    "latin1_bin",
]
VARIANTS = {
    "a": "aAáÄäåÅæÆＡａ[\\",
    "e": "eEéÉèë",
    "i": "iIıİíÎ",
    "o": "oOöÖøØœ",
    "u": "uUüÜúyY",
    "s": ["s", "S", "ß", "ss", "SS", "ſ", "ẞ"],
    "f": ["f", "F", "ﬁ", "ﬀ"],
    "d": "dDðÐđ",
    "l": "lLłŁŀ",
    "h": "hHħ",
    "c": "cCçÇ",
    " ": [" ", "\xa0"],
}
TAILS = ["", " ", "  ", "\x00", "\u200b", "\u0301", "\U0001d41a", "\U0001f600", "\ufffd"]
ALPHABET = "".join(sorted({c for v in VARIANTS.values() for c in "".join(v)})) + "xyz\t·"


@st.composite
def confusable(draw: st.DrawFn) -> list[str]:
    """A variant of a base string, then variants of that one that differ in one character or
    in their tail (so most pairs differ in one place, where a collation may call them equal),
    and one string of the whole alphabet."""
    base = draw(st.text(alphabet="aeiousfdlhc x", min_size=1, max_size=5))
    chars = [draw(st.sampled_from(list(VARIANTS.get(c, c)))) for c in base]
    tail = draw(st.sampled_from(TAILS))
    found = ["".join(chars) + tail]
    for _ in range(4):
        i = draw(st.integers(0, len(base) - 1))
        other = draw(st.sampled_from(list(VARIANTS.get(base[i], base[i]))))
        same = draw(st.booleans())
        found.append(
            "".join([*chars[:i], other, *chars[i + 1 :]])
            + (tail if same else draw(st.sampled_from(TAILS)))
        )
    found.append(draw(st.text(alphabet=ALPHABET, max_size=4)))
    return found


@pytest.fixture(scope="module")
def server(services: Settings) -> Iterator[tuple[Any, list[str]]]:
    with connect(services.resolved_sink) as conn:
        conn.set_character_set("utf8mb4")
        with conn.cursor() as cur:
            cur.execute("SHOW COLLATION")
            present = {str(r[0]) for r in cur.fetchall()}
        yield conn, [c for c in WANTED if c in present]


def _latin1(text: str) -> bool:
    try:
        text.encode("latin1")
    except UnicodeEncodeError:
        return False
    return True


@given(strings=confusable())
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_equal_under_a_collation_means_one_skeleton(
    server: tuple[Any, list[str]], strings: list[str]
) -> None:
    conn, collations = server
    asked: list[tuple[str, str, str]] = []
    parts: list[str] = []
    params: list[str] = []
    for a, b in combinations(strings, 2):
        for collation in collations:
            if collation.startswith("latin1"):
                if not (_latin1(a) and _latin1(b)):
                    continue  # a latin1 column cannot hold it
                parts.append(
                    f"CONVERT(%s USING latin1) = CONVERT(%s USING latin1) COLLATE {collation}"
                )
            else:
                parts.append(f"%s = %s COLLATE {collation}")
            params += [a, b]
            asked.append((collation, a, b))
    with conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(parts), params)
        answers = cur.fetchone()
    for (collation, a, b), equal in zip(asked, answers, strict=True):
        if equal:
            fold = fold_of(collation)
            assert skeleton(literal(a), fold) == skeleton(literal(b), fold), (collation, a, b)


def test_one_fold_for_every_collation_would_be_constant(server: tuple[Any, list[str]]) -> None:
    """Why `keys` folds by the sink's collation: general_ci makes every character outside the
    BMP one, unicode_520_ci makes '𝐀' 'a' and '𝐁' 'b' — together, 'a' is 'b'."""
    conn, collations = server
    # MariaDB 10.11 (the embedded stack) has it: a server without it fails here, never skips.
    assert "utf8mb4_unicode_520_ci" in collations, collations
    with conn.cursor() as cur:
        cur.execute(
            "SELECT %s = %s COLLATE utf8mb4_general_ci, %s = %s COLLATE utf8mb4_unicode_520_ci, "
            "%s = %s COLLATE utf8mb4_unicode_520_ci",
            ["\U0001d400", "\U0001d401", "\U0001d400", "a", "\U0001d401", "b"],
        )
        assert cur.fetchone() == (1, 1, 1)
