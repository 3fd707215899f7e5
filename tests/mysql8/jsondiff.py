"""MySQL 8's JSON diffs (binlog_row_value_options=PARTIAL_JSON) as the server writes them, and
what they do to a document, in plain Python (written from MySQL's json_diff.cc and the
reference manual, apart from the reader's `rowbus.producer.jsondiff`).

A diff vector is a 4-byte little-endian length of what follows, then per diff: the operation
(one byte: REPLACE 0, INSERT 1, REMOVE 2), the path's text with a packed-integer length before
it, and except for REMOVE the value's binary JSON with a packed-integer length before it. A
path prints as MySQL's Json_path::to_string does: ``$``, then ``.name`` (quoted as a JSON string
when the name is not an ECMAScript identifier) or ``[n]``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from tests.mysql8 import jsonb
from tests.mysql8.events import lenenc

OPERATIONS = {"REPLACE": 0, "INSERT": 1, "REMOVE": 2}
_IDENTIFIER = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")

Leg = str | int


@dataclass(frozen=True)
class JsonDiff:
    operation: str
    path: tuple[Leg, ...]
    value: Any = None


def path_text(path: tuple[Leg, ...]) -> str:
    out = "$"
    for leg in path:
        if isinstance(leg, int):
            out += f"[{leg}]"
        elif _IDENTIFIER.match(leg):
            out += "." + leg
        else:
            out += "." + json.dumps(leg, ensure_ascii=False)
    return out


def vector(diffs: list[JsonDiff]) -> bytes:
    """The diff vector's bytes, its length first (a partial JSON column's value in a row)."""
    body = b""
    for diff in diffs:
        path = path_text(diff.path).encode()
        body += bytes([OPERATIONS[diff.operation]]) + lenenc(len(path)) + path
        if diff.operation != "REMOVE":
            value = jsonb.encode(diff.value)
            body += lenenc(len(value)) + value
    return len(body).to_bytes(4, "little") + body


def apply(doc: Any, diffs: list[JsonDiff]) -> Any:
    """What the diffs do to `doc` (a copy), as MySQL's replica applies them; a diff that does
    not fit raises LookupError."""
    doc = copy.deepcopy(doc)
    for diff in diffs:
        parent = doc
        for leg in diff.path[:-1]:
            parent = parent[leg]  # a missing leg raises, as MySQL rejects it
        last = diff.path[-1]
        value = copy.deepcopy(diff.value)
        if isinstance(parent, dict) and isinstance(last, str):
            if diff.operation == "REMOVE":
                del parent[last]
            elif diff.operation == "REPLACE":
                if last not in parent:
                    raise LookupError(diff)
                parent[last] = value
            else:
                if last in parent:
                    raise LookupError(diff)
                parent[last] = value
        elif isinstance(parent, list) and isinstance(last, int):
            if diff.operation == "INSERT":
                parent.insert(last, value)  # past the end: appended
            elif last >= len(parent):
                raise LookupError(diff)
            elif diff.operation == "REMOVE":
                del parent[last]
            else:
                parent[last] = value
        else:
            raise LookupError(diff)
    return doc
