"""Partial JSON updates (`rowbus.producer.jsondiff`): MySQL's diff vectors read and applied to
the before document, giving the text a FULL image of the same update gives. The bytes come
from the test primary's encoder (`tests.mysql8.jsondiff`, written apart from the decoder) and,
once, from a vector derived by hand from MySQL's json_diff.cc."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.producer.jsonb import json_text
from rowbus.producer.jsondiff import JsonDiffError, apply_binary, parse_path, read_diffs
from tests.mysql8 import jsonb
from tests.mysql8.jsondiff import JsonDiff, apply, path_text, vector


def _whole(doc: Any) -> str:
    """What a FULL after image of `doc` publishes."""
    return json_text(jsonb.encode(doc))


def test_a_vector_derived_by_hand_from_mysqls_source_reads_as_the_encoder_writes_it() -> None:
    # Json_diff_vector::write_binary: 4-byte length of the rest; Json_diff::write_binary:
    # operation byte (REPLACE = 0), net_store_length(path) + "$.a", net_store_length(value)
    # + binary JSON of 5 (type 0x05 int16, then 05 00 little-endian).
    by_hand = bytes.fromhex("09000000" + "00" + "03" + "242e61" + "03" + "050500")
    assert vector([JsonDiff("REPLACE", ("a",), 5)]) == by_hand
    (diff,) = read_diffs(by_hand)
    assert (diff.operation, diff.path, diff.value) == (0, ("a",), b"\x05\x05\x00")
    assert apply_binary(jsonb.encode({"a": 1, "b": 2}), by_hand) == '{"a": 5, "b": 2}'
    # REMOVE (2) of $[1] has no value part.
    removal = bytes.fromhex("06000000" + "02" + "04" + "245b315d")
    assert vector([JsonDiff("REMOVE", (1,))]) == removal
    assert apply_binary(jsonb.encode([1, 2, 3]), removal) == "[1, 3]"


@pytest.mark.parametrize(
    ("text", "legs"),
    [
        ("$", ()),
        ("$.a", ("a",)),
        ('$."key with space"[3].b', ("key with space", 3, "b")),
        ('$."quote \\" and \\u00e9"', ('quote " and \u00e9',)),
        ("$ . a [ 2 ]", ("a", 2)),
        ("$.ключ[last]", ("ключ", ("last", 0))),
        ("$[last-2]", (("last", 2),)),
    ],
)
def test_paths_read_as_mysql_prints_them(text: str, legs: tuple[Any, ...]) -> None:
    assert parse_path(text) == legs


@pytest.mark.parametrize("text", ["a", "$.*", "$[*]", "$**.a", "$[x]", '$."open'])
def test_a_path_that_is_not_a_member_or_cell_path_is_refused(text: str) -> None:
    with pytest.raises(JsonDiffError):
        parse_path(text)


@pytest.mark.parametrize(
    ("doc", "diff"),
    [
        ({"a": 1}, JsonDiff("REPLACE", ("b",), 2)),
        ({"a": 1}, JsonDiff("INSERT", ("a",), 2)),
        ({"a": 1}, JsonDiff("REMOVE", ("b",))),
        ({"a": [1]}, JsonDiff("REPLACE", ("a", 1), 2)),
        ({"a": [1]}, JsonDiff("REMOVE", ("a", 5))),
        ({"a": 1}, JsonDiff("REPLACE", ("a", "b"), 2)),
        ({"a": 1}, JsonDiff("INSERT", ("x", "y"), 2)),
    ],
)
def test_a_diff_the_before_document_cannot_take_is_an_error(doc: Any, diff: JsonDiff) -> None:
    with pytest.raises(JsonDiffError, match="does not fit the before image"):
        apply_binary(jsonb.encode(doc), vector([diff]))


def test_no_before_value_and_an_empty_vector() -> None:
    with pytest.raises(JsonDiffError, match="before image has no value"):
        apply_binary(None, vector([JsonDiff("REPLACE", ("a",), 1)]))
    # An unchanged value is logged as an empty vector: the before document stands.
    assert apply_binary(jsonb.encode({"b": [1.5]}), vector([])) == '{"b": [1.5]}'


def test_inserts_into_arrays_and_new_members_land_where_mysql_puts_them() -> None:
    doc = {"list": [1, 2], "zz": {"x": None}}
    diffs = [
        JsonDiff("INSERT", ("list", 0), "first"),
        JsonDiff("INSERT", ("list", 99), 3.25),  # past the end: appended
        JsonDiff("INSERT", ("a",), {"k": "v"}),  # keys print by length, then bytes
        JsonDiff("INSERT", ("zz", "key with space"), 18446744073709551615),
        JsonDiff("REMOVE", ("zz", "x")),
    ]
    got = apply_binary(jsonb.encode(doc), vector(diffs))
    assert got == _whole(apply(doc, diffs))
    assert got == (
        '{"a": {"k": "v"}, "zz": {"key with space": 18446744073709551615}, '
        '"list": ["first", 1, 2, 3.25]}'
    )


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_KEYS = st.text(max_size=6)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


def _containers(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    out = [(path, doc)] if isinstance(doc, dict | list) else []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    for leg, child in items:
        out.extend(_containers(child, (*path, leg)))
    return out


@st.composite
def _doc_and_diffs(draw: st.DrawFn) -> tuple[Any, list[JsonDiff]]:
    """A document and diffs that each fit the document the ones before them leave."""
    doc = draw(st.dictionaries(_KEYS, _JSON, max_size=5))
    current = doc
    diffs: list[JsonDiff] = []
    for _ in range(draw(st.integers(1, 6))):
        path, node = draw(st.sampled_from(_containers(current)))
        value = draw(_JSON)
        if isinstance(node, dict):
            if node and draw(st.booleans()):
                key = draw(st.sampled_from(sorted(node)))
                op = draw(st.sampled_from(["REPLACE", "REMOVE"]))
            else:
                key = draw(_KEYS.filter(lambda k, n=node: k not in n))
                op = "INSERT"
            diff = JsonDiff(op, (*path, key), None if op == "REMOVE" else value)
        else:
            op = draw(st.sampled_from(["INSERT", "REPLACE", "REMOVE"] if node else ["INSERT"]))
            top = len(node) + 2 if op == "INSERT" else len(node) - 1
            index = draw(st.integers(0, top))
            diff = JsonDiff(op, (*path, index), None if op == "REMOVE" else value)
        if not diff.path:
            continue
        current = apply(current, [diff])
        diffs.append(diff)
    return doc, diffs


@settings(max_examples=100, deadline=None)
@given(_doc_and_diffs())
def test_applying_the_binary_diffs_equals_applying_the_operations_in_python(
    case: tuple[Any, list[JsonDiff]],
) -> None:
    doc, diffs = case
    assert apply_binary(jsonb.encode(doc), vector(diffs)) == _whole(apply(doc, diffs))
    assert [parse_path(path_text(d.path)) for d in diffs] == [d.path for d in diffs]
