"""A MySQL 8.4 binlog from a small declarative description: tables, then transactions of row
changes or DDL, laid out in files as the server writes them.

Each file opens with Format_description and Previous_gtids; each transaction is its GTID event
(tagged when the transaction has a tag), Query BEGIN, a Table_map per table, a v2 Rows event
per change kind and table, and Xid; a DDL is its GTID and the Query. `rotate()` ends a file with
a Rotate event. Thread-safe: a test appends while the primary serves the dump.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.mysql8 import events
from tests.mysql8.jsondiff import JsonDiff
from tests.mysql8.rows import Column, rows_body, table_map_body

SERVER_UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
START_TIME = 1_700_000_000
PARTIAL_UPDATE_ROWS = 39

Image = tuple[Any, ...]
_NAMES = {
    2: "Query",
    4: "Rotate",
    15: "Format_desc",
    16: "Xid",
    19: "Table_map",
    30: "Write_rows",
    31: "Update_rows",
    32: "Delete_rows",
    39: "Partial_update_rows",
    33: "Gtid",
    35: "Previous_gtids",
    40: "Transaction_payload",
    42: "Gtid_tagged",
}
"""Event_type as SHOW BINLOG EVENTS prints it."""


@dataclass
class Table:
    schema: str
    name: str
    columns: list[Column]
    table_id: int
    partition: int | None = None
    """With a partition id, the rows events carry the 8.0 partition extra data."""
    create: str = ""


@dataclass(frozen=True)
class Change:
    table: Table
    before: Image | None
    after: Image | None
    diffs: dict[int, list[JsonDiff]] = field(default_factory=dict)
    """An update's JSON columns (by index) logged as diffs, as binlog_row_value_options=
    PARTIAL_JSON logs JSON_SET/JSON_REPLACE/JSON_REMOVE; `after` still holds the whole values."""


@dataclass
class Transaction:
    changes: list[Change] = field(default_factory=list)
    ddl: str | None = None
    schema: str = ""
    tag: str = ""
    """A tag makes the transaction's GTID `uuid:tag:N` (a Gtid_tagged event)."""


@dataclass
class Written:
    gtid: str
    file: str
    start: int
    end: int


class Binlog:
    """Binlog files by name, grown by `add`; `files()` and `read()` for the dump."""

    def __init__(
        self, compression: Any = None, basename: str = "binlog", partial_json: bool = False
    ) -> None:
        self._lock = threading.Condition()
        self._names: list[str] = []
        self._data: dict[str, bytearray] = {}
        self._basename = basename
        self._gnos: dict[str, int] = {}
        self._executed: dict[str, list[int]] = {}
        self.written: list[Written] = []
        self.compression = compression
        """A callable wrapping a transaction's events into one Transaction_payload event
        (`tests.mysql8.payload`); None: events as they are."""
        self.partial_json = partial_json
        """binlog_row_value_options=PARTIAL_JSON: every update is a Partial_update_rows event
        (type 39), as MySQL writes them with the option on, whether or not a row has diffs."""
        self._seq = 0
        self._xid = 0
        self._gtids: dict[tuple[str, int], str] = {}
        self.creates: dict[tuple[str, str], str] = {}
        """Each table's CREATE TABLE as written, by (schema, table): SHOW CREATE TABLE."""
        self._new_file()

    # ---- reading (the primary) ------------------------------------------------------------

    def files(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(n, len(self._data[n])) for n in self._names]

    def read(self, name: str, pos: int) -> bytes:
        with self._lock:
            return bytes(self._data[name][pos:])

    def next_file(self, name: str) -> str | None:
        with self._lock:
            i = self._names.index(name)
            return self._names[i + 1] if i + 1 < len(self._names) else None

    def wait_past(self, name: str, pos: int, timeout: float) -> bool:
        """Waits until file `name` grows past `pos` or another file follows it."""
        with self._lock:
            return self._lock.wait_for(
                lambda: len(self._data[name]) > pos or self._names[-1] != name, timeout
            )

    def kinds(self) -> dict[int, int]:
        """How many events of each type code the files hold."""
        out: dict[int, int] = {}
        with self._lock:
            for data in self._data.values():
                at = 4
                while at + 19 <= len(data):
                    out[data[at + 4]] = out.get(data[at + 4], 0) + 1
                    at += int.from_bytes(data[at + 9 : at + 13], "little")
        return out

    def show_events(self, name: str) -> list[tuple[Any, ...]]:
        """SHOW BINLOG EVENTS IN `name`: (Log_name, Pos, Event_type, Server_id, End_log_pos,
        Info), as MySQL 8.4 prints the kinds a reader's scan looks at."""
        out: list[tuple[Any, ...]] = []
        with self._lock:
            data = bytes(self._data[name])
        at = 4
        while at + 19 <= len(data):
            code = data[at + 4]
            size = int.from_bytes(data[at + 9 : at + 13], "little")
            end = int.from_bytes(data[at + 13 : at + 17], "little")
            info = ""
            if code in (events.GTID, events.GTID_TAGGED):
                info = f"SET @@SESSION.GTID_NEXT= '{self._gtids[(name, at)]}'"
            elif code == events.QUERY:
                body = data[at + 19 : at + size - 4]
                db_len = body[8]
                status = int.from_bytes(body[11:13], "little")
                info = body[13 + status + db_len + 1 :].decode()
            elif code == events.XID:
                info = f"COMMIT /* xid={int.from_bytes(data[at + 19 : at + 27], 'little')} */"
            out.append((name, at, _NAMES.get(code, str(code)), 1, end, info))
            at += size
        return out

    @property
    def current(self) -> tuple[str, int]:
        with self._lock:
            name = self._names[-1]
            return name, len(self._data[name])

    def executed(self) -> str:
        """gtid_executed as the server prints it: ``uuid:1-5:tag:1-2`` per source uuid."""
        with self._lock:
            by_uuid: dict[str, list[str]] = {}
            for key, gnos in sorted(self._executed.items()):
                uuid, _, tag = key.partition(":")
                text = f"{min(gnos)}-{max(gnos)}" if len(gnos) > 1 else str(gnos[0])
                by_uuid.setdefault(uuid, []).append(f"{tag}:{text}" if tag else text)
            return ",".join(f"{u}:{':'.join(parts)}" for u, parts in by_uuid.items())

    # ---- writing (the test) ---------------------------------------------------------------

    def _append(self, name: str, build: Any) -> int:
        data = self._data[name]
        start = len(data)
        probe = build(start + 10_000)
        event = build(start + len(probe))
        data += event
        return start + len(event)

    def _new_file(self) -> None:
        name = f"{self._basename}.{len(self._names) + 1:06d}"
        self._names.append(name)
        self._data[name] = bytearray(b"\xfebin")
        self._append(name, lambda end: events.format_description(end, START_TIME))
        untagged = {k: [(min(v), max(v))] for k, v in self._executed.items() if ":" not in k}
        self._append(name, lambda end: events.previous_gtids(untagged, end))

    def rotate(self) -> None:
        with self._lock:
            name = self._names[-1]
            nxt = f"{self._basename}.{len(self._names) + 1:06d}"
            self._append(name, lambda end: events.rotate(nxt, 4, end))
            self._new_file()
            self._lock.notify_all()

    def add(self, txns: Iterable[Transaction]) -> list[Written]:
        out = []
        with self._lock:
            for txn in txns:
                out.append(self._add(txn))
            self._lock.notify_all()
        return out

    def _add(self, txn: Transaction) -> Written:
        name = self._names[-1]
        key = f"{SERVER_UUID}:{txn.tag}" if txn.tag else SERVER_UUID
        gno = self._gnos[key] = self._gnos.get(key, 0) + 1
        self._executed.setdefault(key, []).append(gno)
        self._seq += 1
        when = START_TIME + self._seq
        start = len(self._data[name])
        body = self._body(txn, when)
        # The GTID event's size depends on the transaction's length (a packed integer), which
        # counts the GTID event: settle both in a few rounds.
        size = len(self._gtid(txn, gno, start, 1000, when))
        for _ in range(4):
            first = start + size
            inner = b"".join(self._events(body, first, when))
            gtid = self._gtid(txn, gno, first, size + len(inner), when)
            if len(gtid) == size:
                break
            size = len(gtid)
        else:
            raise AssertionError("the GTID event's size did not settle")
        self._data[name] += gtid + inner
        text = f"{key}:{gno}"
        self._gtids[(name, start)] = text
        written = Written(text, name, start, len(self._data[name]))
        self.written.append(written)
        return written

    def _gtid(self, txn: Transaction, gno: int, end: int, length: int, when: int) -> bytes:
        micros = when * 1_000_000
        if txn.tag:
            return events.gtid_tagged(
                SERVER_UUID, txn.tag, gno, end, self._seq, length, micros, when
            )
        return events.gtid(SERVER_UUID, gno, end, self._seq, length, micros, when)

    def _body(self, txn: Transaction, when: int) -> list[Any]:
        """The transaction's events after its GTID, as builders of an end position."""
        if txn.ddl is not None:
            ddl = txn.ddl
            created = re.match(r"CREATE TABLE\s+`?(\w+)`?", ddl, re.I)
            if created:
                self.creates[(txn.schema, created.group(1))] = ddl
            return [lambda end: events.query(ddl, txn.schema, end, when)]
        self._xid += 1
        xid = self._xid
        out: list[Any] = [lambda end: events.query("BEGIN", "", end, when)]
        tables: dict[int, Table] = {}
        for change in txn.changes:
            tables.setdefault(change.table.table_id, change.table)
        for table in tables.values():
            body = table_map_body(table.table_id, table.schema, table.name, table.columns)
            out.append(lambda end, body=body: events.event(events.TABLE_MAP, body, end, when))
        update = PARTIAL_UPDATE_ROWS if self.partial_json else events.UPDATE_ROWS
        groups: list[tuple[int, Table, list[Change]]] = []
        for change in txn.changes:
            kind = (
                events.WRITE_ROWS
                if change.before is None
                else events.DELETE_ROWS
                if change.after is None
                else update
            )
            if groups and groups[-1][0] == kind and groups[-1][1] is change.table:
                groups[-1][2].append(change)
            else:
                groups.append((kind, change.table, [change]))
        for i, (kind, table, changes) in enumerate(groups):
            body = rows_body(
                table.table_id,
                table.columns,
                [(c.before, c.after) for c in changes],
                table.partition,
                i == len(groups) - 1,
                [c.diffs for c in changes] if kind == PARTIAL_UPDATE_ROWS else None,
            )
            out.append(lambda end, kind=kind, body=body: events.event(kind, body, end, when))
        out.append(lambda end: events.xid(xid, end, when))
        return out

    def _events(self, body: list[Any], first: int, when: int) -> list[bytes]:
        if self.compression is not None and len(body) > 1:
            return [self.compression(body, first, when)]
        out = []
        pos = first
        for build in body:
            probe = build(pos + 10_000)
            event = build(pos + len(probe))
            out.append(event)
            pos += len(event)
        return out
