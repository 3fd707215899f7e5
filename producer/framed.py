"""The dump stream framed here, past the library: the hot kinds of events read from their bytes.

After the library has connected, sent COM_BINLOG_DUMP and read the first event, `FramedReader`
reads the rest of the stream on the same connection, cut into event packets by
`rowbus.producer.dumpframes` (Transaction_payload packets unpacked into their events). GTID,
XID, table maps seen before and rows events of natively planned tables are read here from the
bytes; every other event is built by the library from the same bytes (`wrap`) and translated as
on the library's path, so both ways give the same events
(`tests/integration/producer/test_fastpath.py`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from rowbus.producer import compressed, dumpframes, fastrows
from rowbus.producer import payload as payloads
from rowbus.producer.assembler import BinlogEvent, GtidMark, Rows, Skipped, Xid
from rowbus.producer.streamtables import OPS, ImagePairs, StreamTables, Table, pure_decoder
from rowbus.producer.tables import Converter
from rowbus.producer.tracker import SchemaTracker

MARIADB_FL_STANDALONE = 0x01
_HEADER = struct.Struct("<IBIII")
"""An event header after the packet's OK byte: timestamp, type, server id, size, end."""
_MARIADB_GTID = struct.Struct("<QIB")
XID, ROTATE, FORMAT_DESCRIPTION, TABLE_MAP, MARIADB_GTID_EVENT = 16, 4, 15, 19, 162
ROWS_KINDS = {
    23: (0, False, WriteRowsEvent),
    24: (2, False, UpdateRowsEvent),
    25: (1, False, DeleteRowsEvent),
    30: (0, True, WriteRowsEvent),
    31: (2, True, UpdateRowsEvent),
    32: (1, True, DeleteRowsEvent),
}
"""Rows event types (v1: MariaDB, v2: MySQL 5.6+) -> decoder mode, v2 (extra data after the
flags), the library's class."""
_MAPS_LIMIT = 10_000


class FramedReader:
    """Assembler events of the stream that `lib` (the library's stream reader) opened. `wrap`
    builds the library's event from a payload (None: one it would not yield), `translate` makes
    an assembler event of it, `file` is the stream's current binlog file."""

    def __init__(
        self,
        lib: Any,
        wrap: Callable[[bytes], Any],
        tables: StreamTables,
        tracker: SchemaTracker | None,
        translate: Callable[[Any], BinlogEvent | None],
        file: Callable[[], str],
    ) -> None:
        self._lib = lib
        self._wrap = wrap
        self._tables = tables
        self._tracker = tracker
        self._translate = translate
        self._file = file
        self._tail = 4 if lib._BinLogStreamReader__use_checksum else 0
        self._maps: dict[bytes, tuple[str, str, int, Table | None, Any]] = {}
        """A table map's bytes (table id to the end of the body) -> schema, table, tracker
        generation, what `StreamTables.on_table_map` made of it and the library's table
        object."""

    def events(self) -> Iterator[BinlogEvent]:
        """The stream's events, until it ends or fails."""
        lib = self._lib
        tail = self._tail
        wrap = self._wrap
        tables = self._tables.tables
        translate = self._translate
        rows = self._rows
        header = _HEADER.unpack_from
        gtid = _MARIADB_GTID.unpack_from
        inflate, compressed_rows = compressed.inflate, compressed.ROWS
        for payload in _unpacked(dumpframes.packets(lib._stream_connection._rfile)):
            ts, kind, server_id, size, end = header(payload, 1)
            if kind in compressed_rows:
                # Inflated here so they take the native way below; Query_compressed goes to
                # the library (`_TypeChecked`), which keeps its size in the binlog.
                payload = inflate(payload, bool(tail))  # noqa: PLW2901 - it stands for it
                kind = payload[5]
            if kind in ROWS_KINDS:
                table_id = int.from_bytes(payload[20:26], "little")
                found = tables.get(table_id)
                if found is None:
                    if table_id in tables:  # an unwanted table's rows
                        yield Skipped(end)
                        continue
                elif found[2] is not None:
                    event = rows(payload, kind, found, end)
                    if event is not None:
                        yield event
                        continue
            elif kind == TABLE_MAP:
                if self._table_map(payload, end):
                    yield Skipped(end)
                continue
            elif kind == XID:
                yield Xid(end, ts)
                continue
            elif kind == MARIADB_GTID_EVENT:
                seq, domain, flags = gtid(payload, 20)
                yield GtidMark(
                    f"{domain}-{server_id}-{seq}",
                    end,
                    size - 19 - tail,
                    bool(flags & MARIADB_FL_STANDALONE),
                    opens=True,
                )
                continue
            built = wrap(payload)
            if built is not None:
                out = translate(built)
                if out is not None:
                    yield out

    def _rows(self, payload: bytes, kind: int, found: Table, end: int) -> Rows | None:
        """A rows event of a natively planned table, read from its bytes; None when its column
        count does not fit the plan (the library builds it then)."""
        mode, v2, cls = ROWS_KINDS[kind]
        p = 30 + int.from_bytes(payload[28:30], "little") - 2 if v2 else 28
        ncols = payload[p]
        plan = found[2]
        assert plan is not None
        if ncols >= 251 or ncols != len(plan):  # not a one-byte length-encoded integer
            return None
        p += 1
        nbytes = (ncols + 7) >> 3
        present = payload[p : p + nbytes]
        p += nbytes
        after = None
        if mode == 2:  # updates: the after image's bitmap
            after = payload[p : p + nbytes]
            p += nbytes
        whole = self._tables.whole.get(ncols)
        if present != whole or (after is not None and after != whole):
            self._tables.require_whole(found[0], ncols, present, after, self._file(), end)
        decoder = _framed_decoder(
            fastrows.decode_body,
            payload,
            p,
            len(payload) - self._tail,
            mode,
            plan,
            present,
            after,
            partial(self._wrap, payload),
            cls,
            found[1],
        )
        return Rows(OPS[cls], found[0], end, decoder)

    def _table_map(self, payload: bytes, end: int) -> bool:
        """A table map: one seen before (same bytes, same tracker generation) taken from the
        cache, another built by the library; False when the library would not yield it."""
        lib, tracker, tables = self._lib, self._tracker, self._tables
        maps = self._maps
        key = payload[20 : len(payload) - self._tail]
        hit = maps.get(key)
        if hit is not None and (tracker is None or tracker.generation(hit[0], hit[1]) == hit[2]):
            table_id = int.from_bytes(payload[20:26], "little")
            tables.tables[table_id] = hit[3]
            lib.table_map[table_id] = hit[4]
            return True
        event = self._wrap(payload)
        if event is None:
            return False
        tables.on_table_map(event, self._file())
        if len(maps) > _MAPS_LIMIT:
            maps.clear()
        maps[key] = (
            event.schema,
            event.table,
            tracker.generation(event.schema, event.table) if tracker is not None else 0,
            tables.tables[event.table_id],
            lib.table_map[event.table_id],
        )
        return True


def _unpacked(packets: Iterator[bytes]) -> Iterator[bytes]:
    """The framed stream with each Transaction_payload replaced by the events it holds."""
    unpack, kind = payloads.unpack, payloads.TRANSACTION_PAYLOAD
    for packet in packets:
        if packet[5] == kind:
            yield from unpack(packet)
        else:
            yield packet


def _framed_decoder(
    decode_body: Callable[..., ImagePairs | None],
    payload: bytes,
    start: int,
    end: int,
    mode: int,
    plan: fastrows.Plan,
    present: bytes,
    after: bytes | None,
    build: Callable[[], Any],
    kind: type,
    convert: Converter,
) -> Callable[[], ImagePairs]:
    """A framed rows event's decoder: native from the bytes; an event the native decoder leaves
    is built by the library from the same bytes and decoded by the pure path."""

    def decode() -> ImagePairs:
        rows = decode_body(payload, start, end, mode, plan, present, after)
        if rows is not None:
            return rows
        return pure_decoder(build(), kind, convert)()

    return decode
