"""MySQL 8's partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``) made whole again.

With PARTIAL_JSON a source logs an UPDATE of a JSON column done by JSON_SET, JSON_REPLACE or
JSON_REMOVE as a Partial_update_rows event (type 39): the v2 Update_rows layout, except that
each after image starts with ``value_options`` (a packed integer; bit 0: partial JSON) and,
when that bit is set, ``partial_bits``: one bit per JSON column of the table (in column order,
whether or not the column is in the image). A JSON column whose bit is set holds a diff vector
instead of a document: a 4-byte little-endian length of the rest, then diffs, each an
operation byte (0 REPLACE, 1 INSERT, 2 REMOVE), the path as text (a packed-integer length,
then e.g. ``$.a[3]."key with space"``) and, except for REMOVE, the new value's binary JSON
(a packed-integer length, then the bytes). MySQL's replica applies the diffs to the row's
before image (MySQL's ``rpl_record.cc``, ``json_diff.cc``); so does this module, so the
published after image is the whole document, as a FULL image would give it.

The rules are MySQL's (``apply_json_diffs``): paths name members and array cells only; REPLACE
needs the path to exist; INSERT adds a member that is not there or puts an element into an
array at its index (past the end: appended); REMOVE needs the member or element to exist.
A diff the before image cannot take (no before value: binlog_row_image=MINIMAL, or a path
that is not there) is a `JsonDiffError`: the reader stops on it, never guesses.

`install` gives mysql-replication's Partial_update_rows class a row reader that goes through
the value layer (`rowbus.producer.values`), whose JSON reader then calls `PartialRow.read`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from pymysqlreplication.row_event import PartialUpdateRowsEvent

from rowbus.producer.jsonb import JsonFormatError, Node, json_text, render, tree

REPLACE, INSERT, REMOVE = 0, 1, 2
OPERATIONS = ("REPLACE", "INSERT", "REMOVE")
PARTIAL_JSON_UPDATES = 1
"""value_options' bit for partial JSON (MySQL's ``PARTIAL_JSON_UPDATES``)."""
JSON_TYPE = 245

Leg = str | int | tuple[str, int]
"""A path leg: a member name, an array index from the start, or ``("last", n)``: ``[last-n]``."""


class JsonDiffError(ValueError):
    """A diff vector that cannot be read, or that the before image cannot take."""


@dataclass(frozen=True)
class Diff:
    operation: int
    path: tuple[Leg, ...]
    value: bytes | None
    """The new value's binary JSON (None for REMOVE)."""
    text: str
    """The path as logged, for messages."""


def _packed(data: bytes, at: int) -> tuple[int, int]:
    """A packed (length-encoded) integer at `at`, and the position after it."""
    first = data[at]
    if first < 0xFB:
        return first, at + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None or at + 1 + width > len(data):
        raise JsonDiffError(f"bad packed integer at byte {at} of a JSON diff")
    return int.from_bytes(data[at + 1 : at + 1 + width], "little"), at + 1 + width


def read_diffs(data: bytes) -> list[Diff]:
    """The diffs of a diff vector (its 4-byte length first), as MySQL writes them."""
    if len(data) < 4:
        raise JsonDiffError("JSON diff vector shorter than its length")
    (length,) = struct.unpack_from("<I", data)
    end = 4 + length
    if end > len(data):
        raise JsonDiffError(f"JSON diff vector of {length} bytes in {len(data) - 4}")
    diffs = []
    at = 4
    try:
        while at < end:
            operation = data[at]
            if operation > REMOVE:
                raise JsonDiffError(f"unknown JSON diff operation {operation}")
            size, at = _packed(data, at + 1)
            text = data[at : at + size].decode("utf-8")
            if at + size > end:
                raise JsonDiffError("JSON diff path runs past the vector")
            at += size
            value = None
            if operation != REMOVE:
                size, at = _packed(data, at)
                if at + size > end:
                    raise JsonDiffError("JSON diff value runs past the vector")
                value = bytes(data[at : at + size])
                at += size
            diffs.append(Diff(operation, parse_path(text), value, text))
    except (IndexError, UnicodeDecodeError) as exc:
        raise JsonDiffError(f"truncated JSON diff ({exc})") from None
    return diffs


def parse_path(text: str) -> tuple[Leg, ...]:
    """The legs of a diff's path (``$``, then ``.name``, ``."quoted name"``, ``[n]``,
    ``[last]``, ``[last-n]``; blanks between legs allowed, as MySQL's path parser does)."""
    at = _blank(text, 0)
    if not text.startswith("$", at):
        raise JsonDiffError(f"JSON path {text!r} does not start with $")
    at += 1
    legs: list[Leg] = []
    while (at := _blank(text, at)) < len(text):
        if text[at] == ".":
            at = _blank(text, at + 1)
            if text.startswith('"', at):
                close = at + 1
                while close < len(text) and text[close] != '"':
                    close += 2 if text[close] == "\\" else 1
                try:
                    legs.append(json.loads(text[at : close + 1]))
                except ValueError:
                    raise JsonDiffError(f"bad quoted member in JSON path {text!r}") from None
                at = close + 1
            else:
                stop = at
                while stop < len(text) and text[stop] not in '.[ \t\n\r"':
                    stop += 1
                name = text[at:stop]
                if not name or name == "*":
                    raise JsonDiffError(f"JSON path {text!r} is not a member or cell path")
                legs.append(name)
                at = stop
        elif text[at] == "[":
            close = text.find("]", at)
            cell = text[at + 1 : close].replace(" ", "") if close > 0 else ""
            if cell.isdigit():
                legs.append(int(cell))
            elif cell == "last":
                legs.append(("last", 0))
            elif cell.startswith("last-") and cell[5:].isdigit():
                legs.append(("last", int(cell[5:])))
            else:
                raise JsonDiffError(f"JSON path {text!r} is not a member or cell path")
            at = close + 1
        else:
            raise JsonDiffError(f"JSON path {text!r} is not a member or cell path")
    return tuple(legs)


def _blank(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _index(leg: Leg, size: int) -> int | None:
    """An array leg's position in an array of `size` (MySQL's Json_array_index: from the
    start, capped at the size; ``last-n`` counted from the end, 0 below the start); None for a
    member leg."""
    if isinstance(leg, int):
        return min(leg, size)
    if isinstance(leg, tuple):
        return size - 1 - leg[1] if leg[1] < size else 0
    return None


def _seek(node: Node, legs: tuple[Leg, ...]) -> Node | None:
    for leg in legs:
        if isinstance(node, list):
            i = _index(leg, len(node))
            if i is None or i >= len(node):
                return None
            node = node[i]
        elif isinstance(node, dict) and isinstance(leg, str):
            found = node.get(leg)
            if found is None:
                return None
            node = found
        else:
            return None
    return node


def apply(doc: Node, diffs: list[Diff]) -> Node:
    """`doc` with `diffs` applied in order (the tree is changed in place and returned)."""
    for diff in diffs:
        if not diff.path:
            raise JsonDiffError(f"{OPERATIONS[diff.operation]} of the whole document")
        parent = _seek(doc, diff.path[:-1])
        last = diff.path[-1]
        value = tree(diff.value) if diff.value is not None else None
        done = False
        if isinstance(parent, dict) and isinstance(last, str):
            there = last in parent
            if diff.operation == REMOVE and there:
                del parent[last]
                done = True
            elif value is not None and there == (diff.operation == REPLACE):
                parent[last] = value
                done = True
        elif isinstance(parent, list):
            i = _index(last, len(parent))
            if i is not None and diff.operation == INSERT and value is not None:
                parent.insert(i, value)
                done = True
            elif i is not None and i < len(parent):
                if diff.operation == REMOVE:
                    del parent[i]
                else:
                    assert value is not None
                    parent[i] = value
                done = True
        if not done:
            raise JsonDiffError(
                f"{OPERATIONS[diff.operation]} at {diff.text} does not fit the before image "
                "(no such path)"
            )
    return doc


def apply_binary(before: bytes | None, vector: bytes) -> str:
    """The text of the document `before` (binary JSON; None: not in the before image) after
    the diff vector `vector`."""
    diffs = read_diffs(vector)
    if before is None:
        raise JsonDiffError("the before image has no value to apply the JSON diffs to")
    try:
        if not diffs:  # MySQL logs an unchanged value as an empty vector
            return json_text(before)
        # Containers are made nodes only where a diff goes: the diffs' parents' paths.
        doc = tree(before, frozenset((*d.path[:-1], "") for d in diffs))
        return render(apply(doc, diffs))
    except JsonFormatError as exc:
        raise JsonDiffError(f"a JSON diff's value: {exc}") from None


class PartialRow:
    """How a Partial_update_rows event's JSON columns are read, one row at a time: the before
    image's documents kept as bytes, then each partial after value made whole from them."""

    def __init__(self, json_columns: dict[int, int]) -> None:
        self._ordinal = json_columns
        """Column index -> its place among the table's JSON columns (its partial bit)."""
        self.before: dict[int, bytes] | None = {}
        """The before image's JSON documents by column index; None while the after image is
        read."""
        self._kept: dict[int, bytes] = {}
        self.partial = b""

    def read(self, packet: Any, length_size: int, i: int) -> str:
        """Column `i`'s JSON value, read from `packet` (not NULL, in the image)."""
        length = packet.read_uint_by_size(length_size)
        raw = bytes(packet.read(length))
        if self.before is not None:
            self.before[i] = raw
            return json_text(raw) if length else "null"
        bit = self._ordinal.get(i)
        if bit is None or not (self.partial[bit >> 3] >> (bit & 7)) & 1:
            return json_text(raw) if length else "null"
        vector = length.to_bytes(length_size, "little") + raw
        return apply_binary(self._kept.get(i), vector)

    def after_image(self, value_options: int, partial: bytes) -> None:
        self._kept, self.before = self.before or {}, None
        self.partial = partial if value_options & PARTIAL_JSON_UPDATES else b""
        if not self.partial:
            self._ordinal = {}


def _fetch_one_row(self: Any) -> dict[str, Any]:
    """PartialUpdateRowsEvent's row reader (mysql-replication's reads one diff of a vector,
    sizes the partial bits with a float and reads an empty vector as NULL)."""
    columns = self.columns
    ordinals = [i for i, c in enumerate(columns) if c.type == JSON_TYPE]
    row = PartialRow({i: n for n, i in enumerate(ordinals)})
    self.__dict__["_rowbus_partial"] = row
    try:
        before = self._read_column_data(self.columns_present_bitmap)
        options = self.packet.read_length_coded_binary()
        if options > PARTIAL_JSON_UPDATES:  # MySQL's replica refuses these as corrupt too
            raise JsonDiffError(f"value_options {options} has bits MySQL 8.4/9 does not write")
        partial = b""
        if options & PARTIAL_JSON_UPDATES:
            partial = bytes(self.packet.read((len(ordinals) + 7) >> 3))
        row.after_image(options, partial)
        after = self._read_column_data(self.columns_present_bitmap2)
    finally:
        del self.__dict__["_rowbus_partial"]
    return {"before_values": before, "after_values": after}


def install() -> None:
    """Give the library's Partial_update_rows events this module's row reader (idempotent)."""
    PartialUpdateRowsEvent._fetch_one_row = _fetch_one_row
