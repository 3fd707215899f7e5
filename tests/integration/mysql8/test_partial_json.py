"""binlog_row_value_options=PARTIAL_JSON through the real reader, from the MySQL 8.4 test primary
(`tests.mysql8`), on the framed, native and pure-Python paths: JSON updates logged as diffs in
Partial_update_rows events (type 39) are published as whole documents, equal to the same
updates logged as whole values (a twin table, whose updates carry no diff, as MySQL logs an
update by other means than JSON_SET/JSON_REPLACE/JSON_REMOVE) and to the documents the
updates make in Python. A diff that does not fit its before image stops the reader with one
line at the event."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rowbus.config import Settings
from rowbus.producer import binlog as binlog_module
from rowbus.producer import fastrows
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.jsonb import json_text
from rowbus.protocol.events import RowChange
from rowbus.waiting import wait_for
from tests.integration.mysql8.test_reader import PATHS, ReaderThread, read_all, setup_for
from tests.mysql8 import jsonb
from tests.mysql8.binlog import Binlog, Change, Table, Transaction
from tests.mysql8.jsondiff import JsonDiff, apply
from tests.mysql8.payload import compressing
from tests.mysql8.primary import Primary
from tests.mysql8.rows import column

CREATE = "CREATE TABLE `{}` (id INT NOT NULL PRIMARY KEY, doc JSON, note VARCHAR(20))"
DOCS = {
    1: {
        "a": 1,
        "name": "first",
        "list": [1, 2, 3],
        "nested": {"deep": {"k": "v", "n": [True, False]}},
        "key with space": True,
    },
    2: {"tags": ["x"], "price": 9.99, "meta": {}},
    3: {"untouched": [1, {"a": None}]},
}
UPDATES: list[tuple[int, list[JsonDiff]]] = [
    # JSON_SET of an existing member, and of new ones (strings with escapes and unicode)
    (1, [JsonDiff("REPLACE", ("a",), 2)]),
    (1, [JsonDiff("INSERT", ("b",), 'ünïcödé "quoted" \\ back\nslash\ttab \u0001 😀')]),
    # JSON_REMOVE of a member, of an element; JSON_INSERT / array appends
    (1, [JsonDiff("REMOVE", ("name",)), JsonDiff("REMOVE", ("list", 0))]),
    (1, [JsonDiff("INSERT", ("list", 2), 4), JsonDiff("INSERT", ("list", 0), "head")]),
    # nested objects and a member name that needs quoting in the path
    (1, [JsonDiff("REPLACE", ("nested", "deep", "k"), {"x": [None, 1.5e300, -0.0]})]),
    (1, [JsonDiff("REPLACE", ("key with space",), None)]),
    (1, [JsonDiff("INSERT", ("nested", "deep", "n", 1), {"é": "ü"})]),
    # numbers: big integers both ways, doubles, null
    (2, [JsonDiff("INSERT", ("big",), 18446744073709551615)]),
    (2, [JsonDiff("INSERT", ("small",), -9223372036854775808), JsonDiff("REMOVE", ("tags", 0))]),
    (2, [JsonDiff("REPLACE", ("price",), 0.1), JsonDiff("INSERT", ("meta", "n"), None)]),
    (2, [JsonDiff("INSERT", ("tags", 0), [1, [2, [3]]])]),
    # an unchanged document: an empty vector
    (3, []),
]


def _table(database: str, name: str, table_id: int) -> Table:
    columns = [
        column("id", "INT", primary=True),
        column("doc", "JSON"),
        column("note", "VARCHAR(20)"),
    ]
    return Table(database, name, columns, table_id)


def _row(i: int, doc: Any, step: int) -> tuple[Any, ...]:
    return (i, json.dumps(doc), f"step {step}")


def build(log: Binlog, database: str) -> dict[int, list[str]]:
    """The two tables' CREATE and inserts, then each update of UPDATES in a transaction of its
    own, to `partial` as diffs and to `whole` as whole values; per id, the documents it goes
    through after the insert (as a FULL image publishes them)."""
    partial, whole = _table(database, "partial", 200), _table(database, "whole", 201)
    log.add([Transaction(ddl=f"CREATE DATABASE `{database}`")])
    log.add([Transaction(ddl=CREATE.format(t.name), schema=database) for t in (partial, whole)])
    docs = {i: dict(d) for i, d in DOCS.items()}
    inserts = [Change(t, None, _row(i, d, 0)) for t in (partial, whole) for i, d in docs.items()]
    inserts.append(Change(partial, None, (4, None, "null doc")))
    log.add([Transaction(inserts)])
    expected: dict[int, list[str]] = {i: [] for i in docs}
    for step, (i, diffs) in enumerate(UPDATES, start=1):
        before, after = docs[i], apply(docs[i], diffs)
        old, new = _row(i, before, step - 1), _row(i, after, step)
        changes = [Change(partial, old, new, {1: diffs}), Change(whole, old, new)]
        if step == 1:  # a NULL document, no diff: its partial bit is 0
            changes.append(Change(partial, (4, None, "null doc"), (4, None, "still null")))
        log.add([Transaction(changes)])
        docs[i] = after
        expected[i].append(json_text(jsonb.encode(after)))
    return expected


VARIANTS = {**{p: (p, False) for p in PATHS}, "framed-compressed": ("framed", True)}
"""Test id -> (decoding path, binlog_transaction_compression=ON)."""


@pytest.fixture(params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[str, bool]:
    return VARIANTS[request.param]


@pytest.fixture
def primary(variant: tuple[str, bool]) -> Iterator[tuple[Primary, str, dict[int, list[str]]]]:
    compressed = variant[1]
    log = Binlog(compression=compressing() if compressed else None, partial_json=True)
    database = f"pj_{uuid.uuid4().hex[:6]}"
    expected = build(log, database)
    variables = {"binlog_transaction_compression": "ON" if compressed else "OFF"}
    with Primary(log, variables=variables) as server:
        yield server, database, expected


def _paths(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    fast, framed = PATHS[path]
    monkeypatch.setattr(binlog_module, "FRAMED", framed)
    if not fast:
        monkeypatch.setattr(fastrows, "AVAILABLE", False)


def test_partial_json_updates_are_published_whole_as_full_images_are(
    primary: tuple[Primary, str, dict[int, list[str]]],
    variant: tuple[str, bool],
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also inside Transaction_payload events (binlog_transaction_compression=ON)."""
    server, database, expected = primary
    path, compressed = variant
    _paths(monkeypatch, path)
    assert server.variables["binlog_row_value_options"] == "PARTIAL_JSON"
    kinds = server.binlog.kinds()
    if compressed:  # every transaction of row changes is one payload
        assert kinds.get(40) == 1 + len(UPDATES) and 39 not in kinds, kinds
    else:
        assert kinds.get(39) == 2 * len(UPDATES) + 1 and 31 not in kinds, kinds
    setup = setup_for(services, server, database, make_topic, unique)
    total = 2 * len(DOCS) + 1 + 2 * len(UPDATES) + 1
    records = read_all(setup, total)
    assert not server.seen.unanswered, server.seen.unanswered
    updates: dict[str, dict[int, list[tuple[Any, Any]]]] = {"partial": {}, "whole": {}}
    for r in records:
        if isinstance(r, RowChange) and r.schema == database and r.before and r.after:
            updates[r.table].setdefault(int(r.after[0]), []).append((r.before[1], r.after[1]))
    assert updates["partial"] == updates["whole"] | {4: [(None, None)]}
    for i, docs in expected.items():
        assert [after for _, after in updates["partial"][i]] == docs, i
        # each update's before image is the document the one before it published
        befores = [before for before, _ in updates["partial"][i]]
        assert befores[1:] == docs[:-1], i


def test_a_diff_that_does_not_fit_its_before_image_stops_the_reader_in_one_line(
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = Binlog(partial_json=True)
    database = f"pjbad_{uuid.uuid4().hex[:6]}"
    table = _table(database, "partial", 200)
    log.add([Transaction(ddl=f"CREATE DATABASE `{database}`")])
    log.add([Transaction(ddl=CREATE.format("partial"), schema=database)])
    log.add([Transaction([Change(table, None, _row(1, {"a": 1}, 0))])])
    # The before image says {"a": 1}; the diff replaces a member it does not have.
    bad = [JsonDiff("REPLACE", ("missing",), 2)]
    (written,) = log.add(
        [Transaction([Change(table, _row(1, {"a": 1}, 0), _row(1, {}, 1), {1: bad})])]
    )
    _paths(monkeypatch, "pure")
    with Primary(log) as server:
        setup = setup_for(services, server, database, make_topic, unique)
        with ReaderThread(setup, start="file:binlog.000001:4", snapshot="never") as r:
            wait_for(lambda: r.error is not None, timeout=60, what="the reader to stop")
    assert isinstance(r.error, ServerMisconfiguredError), r.error
    text = str(r.error)
    assert "\n" not in text
    assert text.startswith(f"{written.file}:"), text
    assert "REPLACE at $.missing does not fit the before image" in text, text
    assert "binlog_row_value_options" in text and "binlog_row_image=FULL" in text, text
