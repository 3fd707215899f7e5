"""Partial_update_rows events (MySQL's binlog_row_value_options=PARTIAL_JSON) through the
reader's stream on every path (framed, native, pure, the transaction scan), from bytes replayed
on a fake connection: the JSON diffs are applied to the before image; an after image taken from
a real server's binlog reads as its documents; a before image without the JSON column (MINIMAL)
stops the reader in one line at the event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from rowbus.producer.assembler import BinlogEvent, Rows, Skipped, Xid
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.jsonb import json_text
from rowbus.protocol.events import Op
from tests.mysql8 import jsonb
from tests.mysql8.jsondiff import JsonDiff, apply
from tests.mysql8.rows import column, partial_image, rows_body, table_map_body
from tests.unit.producer import test_event_types as replay
from tests.unit.producer.mysql8_events import event

TABLE_ID = 88
PARTIAL_UPDATE_ROWS = 39


class _MySQL8Ctl(replay._Ctl):
    def _get_dbms(self) -> str:
        return "mysql"


class _MySQL8Stream(replay._ReplayStream):
    def _open(self) -> Any:
        lib = super()._open()
        lib._ctl_connection = _MySQL8Ctl()
        lib.mysql_version = (8, 4, 3)
        # What the library sets on connecting to a server with binlog_row_metadata=FULL.
        lib._BinLogStreamReader__optional_meta_data = True
        return lib


def _read(payloads: list[bytes], path: str) -> Iterator[BinlogEvent]:
    stream = _MySQL8Stream(payloads, **replay.PATHS[path])
    try:
        yield from stream.events()
    finally:
        stream.close()


def _decoded(events: list[BinlogEvent]) -> list[tuple[Any, Any]]:
    rows = [e for e in events if isinstance(e, Rows)]
    assert all(r.op is Op.UPDATE for r in rows)
    return [pair for r in rows for pair in r.decode()]


COLUMNS = [column("id", "INT", primary=True), column("doc", "JSON"), column("other", "JSON")]


def _table_map(columns: list[Any] = COLUMNS) -> bytes:
    return event(19, table_map_body(TABLE_ID, "shop", "docs", columns), position=300)


@pytest.mark.parametrize("path", list(replay.PATHS))
def test_a_partial_update_is_published_whole_on_every_path(path: str) -> None:
    doc = {"a": [1, 2], "b": {"c": "ü"}}
    diffs = [JsonDiff("INSERT", ("a", 1), 1.5), JsonDiff("REMOVE", ("b", "c"))]
    other = [7, None]  # not logged as a diff: its partial bit is 0
    before = (1, json.dumps(doc), json.dumps(other))
    after = (1, json.dumps(apply(doc, diffs)), json.dumps(other))
    body = rows_body(TABLE_ID, COLUMNS, [(before, after)], partial=[{1: diffs}])
    update = event(PARTIAL_UPDATE_ROWS, body, position=500)
    seen = list(_read([replay._rotate(), _table_map(), update, replay.XID], path))
    assert isinstance(seen[-1], Xid)
    if path == "transaction-scan":  # rows are not read there, only passed
        assert all(isinstance(e, Skipped) for e in seen[1:-1])
        return
    ((old, new),) = _decoded(seen)
    assert old == (1, '{"a": [1, 2], "b": {"c": "ü"}}', "[7, null]")
    assert new == (1, '{"a": [1, 1.5, 2], "b": {}}', "[7, null]")
    assert new[1] == json_text(jsonb.encode(apply(doc, diffs)))


# An after image of a Partial_update_rows event written by a real MySQL server, as published
# (MIT licence) in go-mysql's replication/parser_test.go, TestRowsEventDecodeImageWithEmptyJSON:
# columns INT, INT, JSON, JSON, JSON, DATETIME, DATETIME, INT. value_options 1 (PARTIAL_JSON),
# partial bits 0b111 (all three JSON columns as diffs), no NULL, then each diff vector empty
# (a 4-byte zero length: the documents did not change).
CAPTURED_AFTER = bytes.fromhex(
    "0107" + "00" + "f62b0f00" + "ebaf5002" + "00000000" * 3 + "99acfabec3" + "99afab311834110000"
)
CAPTURED_COLUMNS = [
    column("id", "INT", primary=True),
    column("n", "INT"),
    column("j1", "JSON"),
    column("j2", "JSON"),
    column("j3", "JSON"),
    column("t1", "DATETIME"),
    column("t2", "DATETIME"),
    column("m", "INT"),
]


@pytest.mark.parametrize("path", ["framed", "pure"])
def test_an_after_image_from_a_real_server_keeps_its_unchanged_documents(path: str) -> None:
    docs = [{"k": [1, "two"]}, [], {"deep": {"x": None}}]
    before = b"\x00" + CAPTURED_AFTER[3:11]
    for d in docs:
        raw = jsonb.encode(d)
        before += len(raw).to_bytes(4, "little") + raw
    before += CAPTURED_AFTER[-14:]
    head = TABLE_ID.to_bytes(6, "little") + b"\x01\x00\x02\x00" + bytes([8]) + b"\xff\xff"
    update = event(PARTIAL_UPDATE_ROWS, head + before + CAPTURED_AFTER, position=500)
    table_map = event(19, table_map_body(TABLE_ID, "shop", "cap", CAPTURED_COLUMNS), 300)
    seen = list(_read([replay._rotate(), table_map, update, replay.XID], path))
    ((old, new),) = _decoded(seen)
    assert new[:2] == (994294, 38842347) and new[7] == 4404
    assert list(new[2:5]) == [json_text(jsonb.encode(d)) for d in docs]
    assert new == old


@pytest.mark.parametrize("path", ["framed", "pure"])
def test_a_before_image_without_the_json_column_stops_the_reader_in_one_line(path: str) -> None:
    """binlog_row_image=MINIMAL: the before image holds the key only; the diff has nothing to
    apply to."""
    diffs = [JsonDiff("REPLACE", ("a",), 2)]
    head = TABLE_ID.to_bytes(6, "little") + b"\x01\x00\x02\x00" + bytes([3])
    head += b"\x01" + b"\x07"  # before image: the key only; after image: every column
    before = b"\x00" + (1).to_bytes(4, "little")
    after_image = partial_image(COLUMNS, (1, "{}", "[]"), {1: diffs})
    update = event(PARTIAL_UPDATE_ROWS, head + before + after_image, position=500)
    with pytest.raises(ServerMisconfiguredError) as refused:
        list(_read([replay._rotate(), _table_map(), update, replay.XID], path))
    text = str(refused.value)
    assert "\n" not in text and text.startswith(f"{replay.FILE}:500: shop.docs"), text
    assert "before image lacks doc, other" in text and "binlog_row_image=FULL" in text, text


def test_value_options_with_bits_mysql_does_not_write_stop_the_reader() -> None:
    row = (1, "{}", "[]")
    body = rows_body(TABLE_ID, COLUMNS, [(row, row)], partial=[{}])
    assert body.endswith(partial_image(COLUMNS, row, {}))
    cut = len(body) - len(partial_image(COLUMNS, row, {}))
    assert body[cut] == 0  # value_options 0: no diff in the row
    update = event(PARTIAL_UPDATE_ROWS, body[:cut] + b"\x02" + body[cut + 1 :], position=500)
    seen = list(_read([replay._rotate(), _table_map(), update, replay.XID], "pure"))
    with pytest.raises(ServerMisconfiguredError) as refused:
        _decoded(seen)
    text = str(refused.value)
    assert text.startswith(f"{replay.FILE}:500: shop.docs: binlog_row_value_options"), text
    assert "value_options 2 has bits" in text and "\n" not in text, text
