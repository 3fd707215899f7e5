# ruff: noqa: RUF001 - look-alike characters are this module's subject
"""The key the sink sees (`keys`): equalities MariaDB's collations hold give equal skeletons;
the real server's word on them is `tests/integration/spark_apply/test_keys.py`."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from rowbus.protocol.events import Op
from rowbus.routing.routes import Router
from rowbus.spark_apply.causality import conflict_groups
from rowbus.spark_apply.changes import collapse
from rowbus.spark_apply.keys import Fold, fold_of, sink_key, skeleton
from rowbus.spark_apply.literals import as_literals, literal
from rowbus.spark_apply.planner import Envelope
from tests.unit.spark_apply.events import row, table

# (collation, a, b): a = b under that collation (MariaDB 10.11).
EQUAL = [
    ("utf8mb4_general_ci", "c", "C"),
    ("utf8mb4_general_ci", "a", "a  "),
    ("utf8mb4_general_ci", "é", "E"),
    ("utf8mb4_general_ci", "ß", "s"),
    ("utf8mb4_general_ci", "ı", "I"),
    ("utf8mb4_general_ci", "😀", "😁"),
    ("utf8mb4_general_ci", "😀", "\ufffd"),
    ("utf8mb4_unicode_ci", "ß", "ss"),
    ("utf8mb4_unicode_ci", "Straße", "STRASSE"),
    ("utf8mb4_unicode_ci", "İ", "i"),
    ("utf8mb4_unicode_ci", "ﬁ", "fi"),
    ("utf8mb4_unicode_ci", "Ａ", "a"),
    ("utf8mb4_unicode_ci", "a\x00", "a"),
    ("utf8mb4_unicode_ci", "a\u200b", "a"),
    ("utf8mb4_unicode_ci", "a\xa0", "a"),
    ("utf8mb4_unicode_ci", "œ", "oe"),
    ("utf8mb4_unicode_520_ci", "æ", "ae"),
    ("utf8mb4_unicode_520_ci", "ø", "o"),
    ("utf8mb4_unicode_520_ci", "ł", "l"),
    ("utf8mb4_unicode_520_ci", "ŀ", "l"),
    ("utf8mb4_unicode_520_ci", "\U0001d400", "a"),
    ("latin1_swedish_ci", "ü", "y"),
    ("latin1_swedish_ci", "ä", "æ"),
    ("latin1_swedish_ci", "Å", "["),
    ("latin1_swedish_ci", "ð", "d"),
    ("utf8mb4_bin", "a", "a "),
]


@pytest.mark.parametrize(("collation", "a", "b"), EQUAL)
def test_what_a_collation_calls_equal_has_one_skeleton(collation: str, a: str, b: str) -> None:
    fold = fold_of(collation)
    assert skeleton(literal(a), fold) == skeleton(literal(b), fold)


@pytest.mark.parametrize(
    ("collation", "a", "b"),
    [
        ("utf8mb4_bin", "a", "A"),
        ("utf8mb4_nopad_bin", "a", "a "),
        (None, "a", "a "),
        ("utf8mb4_general_ci", "a", "b"),
    ],
)
def test_what_it_tells_apart_may_stay_apart(collation: str | None, a: str, b: str) -> None:
    fold = fold_of(collation)
    assert skeleton(literal(a), fold) != skeleton(literal(b), fold)


def test_escapes_are_read_before_folding() -> None:
    # 'A\0' and 'a' are one key to unicode_ci (NUL is ignorable): the literal escapes the NUL.
    assert skeleton(literal("it's A\x00"), Fold.TEXT) == skeleton(literal("IT'S a"), Fold.TEXT)


def test_values_that_are_not_text_stay_as_they_are() -> None:
    for value in (12, 1.5, None, b"\x00ab", "2024-01-01"):
        text = literal(value)
        assert skeleton(text, Fold.EXACT) == text
    assert skeleton("12", Fold.TEXT) == "12"
    assert skeleton("X'0a'", Fold.TEXT) == "X'0a'"


def test_a_key_folds_column_by_column() -> None:
    key = (literal(1), literal("Ab "), literal("Ab "))
    assert sink_key(key, (Fold.EXACT, Fold.TEXT, Fold.PAD)) == ("1", "'ab", "'Ab")
    assert sink_key(key, ()) == ("1", "'ab", "'ab")  # undescribed columns: TEXT


TBL = table(columns=("k", "v"), key=("k",))


def _shards(script: list[tuple[Op, Any, Any]], folds: dict[str, Fold]) -> dict[int, Any]:
    envs = [
        Envelope("t", 0, i, row(i + 1, op, before, after, tbl=TBL))
        for i, (op, before, after) in enumerate(script)
    ]

    def shard_of(_target: Any, skeleton: tuple[Any, ...]) -> int:
        return zlib.crc32(repr(skeleton).encode()) % 4

    return collapse(envs, Router([]), lambda _sid: TBL, shard_of, folds=lambda _t: folds)


@pytest.mark.parametrize("word", ["c", "d", "ab", "Straße", "x", "é", "q", "zz"])
def test_keys_the_sink_calls_equal_are_written_by_one_shard(word: str) -> None:
    """Issue 31: 'c' deleted and 'C' inserted in one step went to two shards, whose order
    decided whether the delete took the new row."""
    other = word.upper() + " "
    script = [
        (Op.INSERT, None, (word, "1")),
        (Op.DELETE, (word, "1"), None),
        (Op.INSERT, None, (other, "2")),
        (Op.UPDATE, (other, "2"), (word, "3")),  # a key update of case (and pad) only
        (Op.UPDATE, (word, "3"), (word, "4")),
    ]
    shards = _shards(script, {"k": Fold.TEXT})
    (tc,) = [t for per in shards.values() for t in per.values()]  # one shard, one table
    assert set(tc.upserts) == {(literal(word),)}
    assert set(tc.deletes) == {(literal(other),)}
    assert set(tc.clear) == {(literal(word),)}  # one row to the sink: cleared first


def test_a_binary_key_may_be_split_by_case() -> None:
    script = [(Op.INSERT, None, (w, "1")) for w in ("a", "A", "b", "B", "c", "C")]
    shards = _shards(script, {"k": Fold.PAD})
    assert len(shards) > 1
    assert not any(t.clear for per in shards.values() for t in per.values())


def test_a_unique_value_moved_by_case_is_a_conflict() -> None:
    cols = ("id", "name")
    images = {
        ("2",): [(cols, as_literals((2, "z"))), (cols, as_literals((2, "X")))],
        ("1",): [(cols, as_literals((1, "x"))), (cols, as_literals((1, "y")))],
    }
    assert conflict_groups(images, (("name",),)) == [[("2",), ("1",)]]
    assert conflict_groups(images, (("name",),), lambda _c: (Fold.PAD,)) == []
