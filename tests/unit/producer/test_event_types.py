"""Every binlog event type code is decoded, ignored with a reason, or stops the reader.

Event bytes go through the stream decoder as a live stream does — the library's packet reading
for the first event (and every event on the library paths), then `dumpframes` on the framed
path — over a connection that replays the bytes instead of a socket. A compressed event or an
unknown type code must stop every path with one line at its position; before the fix the
library dropped them unseen (it leaves out types it has no class for). MariaDB's compressed
events are decoded: `test_compressed_events.py`.
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymysql.protocol import MysqlPacket

from rowbus.clients.settings import SourceConnection
from rowbus.producer import fastrows, framed
from rowbus.producer.assembler import BinlogEvent, Rotate, Skipped, Xid
from rowbus.producer.binlog import TRANSACTION_EVENTS, BinlogStream, _Unpacking
from rowbus.producer.eventtypes import EVENT_TYPES, IGNORED, PASSED, Handling
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.tables import TableFilter
from tests.unit.producer.mysql8_events import event

FILE = "binlog.000007"
PATHS = {
    "framed": {"fast": True, "framed": True},
    "native": {"fast": True, "framed": False},
    "pure": {"fast": False},
    "transaction-scan": {"only_events": TRANSACTION_EVENTS},
}
REFUSED_KINDS = {
    # code: (what the line names, the setting to change)
    26: ("Incident", "snapshot"),
    250: ("binlog event type 250 is unknown", "upgrade rowbus"),
}


def _rotate(position: int = 4) -> bytes:
    """The server's first event of a dump: a rotate to the file asked for (timestamp 0)."""
    body = struct.pack("<Q", position) + FILE.encode()
    header = struct.pack("<IBIIIH", 0, 4, 1, 19 + len(body), 0, 0x20)
    return b"\x00" + header + body


def _wire(payloads: list[bytes]) -> bytes:
    """Payloads framed as MySQL packets (3-byte length, sequence id), then the dump's EOF."""
    out = b""
    for seq, payload in enumerate([*payloads, b"\xfe\x00\x00\x02\x00"], start=1):
        out += len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload
    return out


class _ReplayConnection:
    """The stream connection's two reading ends over the same bytes: pymysql's `_read_packet`
    (the library's framing) and the buffered `_rfile` (`dumpframes`)."""

    def __init__(self, wire: bytes) -> None:
        self._rfile = io.BufferedReader(io.BytesIO(wire))  # type: ignore[arg-type]

    def _read_packet(self) -> MysqlPacket:
        head = self._rfile.read(4)
        size = int.from_bytes(head[:3], "little")
        return MysqlPacket(self._rfile.read(size), "utf8")

    def close(self) -> None:
        pass


class _Ctl:
    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mariadb"

    def close(self) -> None:
        pass


class _ReplayStream(BinlogStream):
    def __init__(self, payloads: list[bytes], **kwargs: Any) -> None:
        source = SourceConnection(name="s", host="127.0.0.1", port=1, user="u", password="p")
        super().__init__(source, 1, FILE, 4, TableFilter(), blocking=False, **kwargs)
        self._wire = _wire(payloads)

    def _open(self) -> Any:
        lib = super()._open()
        p = "_BinLogStreamReader__"
        setattr(lib, p + "connected_stream", True)
        setattr(lib, p + "connected_ctl", True)
        lib._stream_connection = _ReplayConnection(self._wire)
        # As `_GuardedConnect` wraps the real stream connection (Transaction_payload events).
        lib._stream_connection._read_packet = _Unpacking(lib._stream_connection._read_packet)
        lib._ctl_connection = _Ctl()
        lib.mysql_version = (10, 11, 0)
        return lib


def _read(payloads: list[bytes], path: str) -> Iterator[BinlogEvent]:
    # CI builds the native decoder (test_fastrows asserts it): its paths fail without it.
    assert path not in ("framed", "native") or fastrows.AVAILABLE, "the native decoder is not built"
    stream = _ReplayStream(payloads, **PATHS[path])
    try:
        yield from stream.events()
    finally:
        stream.close()


XID = event(16, struct.pack("<Q", 9), position=900)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("code", list(REFUSED_KINDS), ids=str)
def test_a_refused_or_unknown_event_stops_every_path_with_one_line_at_its_position(
    code: int, path: str
) -> None:
    name, fix = REFUSED_KINDS[code]
    payloads = [_rotate(), XID, event(code, b"\x00" * 24, position=1234), XID]
    seen: list[BinlogEvent] = []
    with pytest.raises(ServerMisconfiguredError) as refused:
        seen.extend(_read(payloads, path))
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith(f"{FILE}:1234: "), text
    assert name in text and fix in text, text
    # Read up to it, and not one event past it.
    assert isinstance(seen[0], Rotate)
    assert [type(e) for e in seen[1:]] == [Xid]


@pytest.mark.parametrize("path", list(PATHS))
def test_ignored_event_types_pass_on_every_path(path: str) -> None:
    payloads = [_rotate(), *(event(c, b"\x00" * 24, position=100 + c) for c in IGNORED), XID]
    seen = list(_read(payloads, path))
    assert isinstance(seen[0], Rotate) and isinstance(seen[-1], Xid)
    assert all(isinstance(e, Skipped) for e in seen[1:-1])


def test_every_type_code_of_mysql_84_9_and_mariadb_11_is_classified_with_a_reason() -> None:
    assert set(range(43)) | set(range(160, 172)) == set(EVENT_TYPES)
    for code, kind in EVENT_TYPES.items():
        assert (kind.handling is Handling.DECODED) == (not kind.why), code
        assert (code in PASSED) == (kind.handling is not Handling.REFUSED), code


def test_the_kinds_the_framed_path_reads_without_the_library_are_decoded_ones() -> None:
    """The framed path reads these from the bytes and never builds the library's packet (where
    the type check sits): each must be a decoded type."""
    natively = {*framed.ROWS_KINDS, framed.XID, framed.TABLE_MAP, framed.MARIADB_GTID_EVENT}
    assert all(EVENT_TYPES[c].handling is Handling.DECODED for c in natively)


def test_the_operations_doc_names_every_ignored_and_refused_type() -> None:
    readme = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    section = readme[readme.index("### Binlog event types") :]
    section = section[: section.index("\n#")]
    for code, kind in EVENT_TYPES.items():
        if kind.handling is not Handling.DECODED:
            assert re.search(rf"\b{kind.name}\b", section), (code, kind.name)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_transaction_payload_is_read_as_its_events_on_every_path(path: str) -> None:
    """binlog_transaction_compression=ON: the payload's events (here BEGIN and an Xid, zstd)
    come out as if uncompressed, at the payload's end position; the next event follows."""
    from tests.mysql8 import events as m8
    from tests.mysql8.payload import compressing

    inner = [
        lambda end: m8.query("BEGIN", "", end, 1_700_000_000),
        lambda end: m8.xid(5, end, 1_700_000_000),
    ]
    packed = compressing(checksum=False)([lambda e, b=b: b(e) for b in inner], 1000, 1)
    payload = b"\x00" + packed[:13] + (2000).to_bytes(4, "little") + packed[17:]
    seen = list(_read([_rotate(), payload, XID], path))
    assert isinstance(seen[0], Rotate)
    assert [type(e).__name__ for e in seen[1:]] == ["Query", "Xid", "Xid"]
    assert [e.end for e in seen[1:3]] == [2000, 2000]  # type: ignore[attr-defined]
