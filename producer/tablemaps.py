"""Table maps parsed once per table id and layout, not once per transaction.

The server writes a TableMapEvent before the rows of every table in every transaction. On
single-row transactions mysql-replication (1.0.17) spends about half its time re-parsing them
(column metadata, then FULL row metadata: names, charsets, ENUM/SET members; see
notes/ENVIRONMENT.md). Two table maps with the same body bytes describe the same table id with
the same layout, so `install` wraps ``TableMapEvent.__init__``: the first event with a body
parses as before; the next ones with that body take the parsed attributes over (the `Column`
objects included, so their per-column readers and `rowbus.producer.binlog`'s per-layout caches
carry over too) and register the table in the stream's table map, as the parse does.

What is never shared: the attributes of the event itself (its packet, timestamp, size, the
stream's table map and control connection), set by ``BinLogEvent.__init__`` on every event.
A DDL or a new table id changes the body, hence the key: nothing stale can be served.

ENUM and SET members: the library decodes them as UTF-8 and makes a member it cannot decode
an empty string, so a latin1 ENUM member 'é' became '' (the error value) downstream. Here the
members are kept as bytes while parsing and decoded by their column's character set after.

Signedness: the FULL metadata's signedness bitmap has one bit per numeric column. MariaDB
counts YEAR among them (measured: 10.11 writes YEAR's bit); MySQL does not (its
``is_numeric_type``: the integers, DECIMAL, FLOAT, DOUBLE). mysql-replication counts YEAR on
both, so on MySQL every numeric column after a YEAR took its neighbour's bit: an INT UNSIGNED
after a YEAR read 4294967295 as -1. `_numeric` counts YEAR on MariaDB only (found with the
MySQL 8 test primary, `tests/integration/mysql8/test_signedness.py`).
"""

from __future__ import annotations

from typing import Any

from pymysql.constants import FIELD_TYPE
from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

from rowbus.producer.values import UnsupportedCharsetError, charset_of, text_decoder

CACHE_LIMIT = 10_000
"""Bodies kept; cleared when exceeded (a server with more live tables re-parses some)."""

_parsed: dict[tuple[bytes, tuple[Any, ...]], dict[str, Any]] = {}
_ORIGINAL_INIT = TableMapEvent.__init__
_LIBRARY_NUMERIC = TableMapEvent._is_numeric_column
_PER_EVENT = frozenset(
    {
        "packet",
        "table_map",
        "event_type",
        "timestamp",
        "event_size",
        "_post_header_lengths",
        "_ctl_connection",
        "mysql_version",
        "_ignore_decode_errors",
        "_verify_checksum",
        "_is_event_valid",
        "_processed",
        "complete",
        "dbms",
    }
)


class Stats:
    """Table maps parsed and served from the cache since start (tests and benchmarks)."""

    parsed = 0
    reused = 0


def _member_bytes(self: Any, length: int) -> list[list[bytes]]:
    """The library's `_read_type_values`, leaving each ENUM/SET member undecoded."""
    packet = self.packet
    out: list[list[bytes]] = []
    end = packet.read_bytes + length
    while packet.read_bytes < end:
        count = packet.read_length_coded_binary()
        out.append([packet.read_variable_length_string() for _ in range(count)])
    return out


def _decode_members(event: Any) -> None:
    for column in getattr(event, "columns", ()):
        for attr in ("enum_values", "set_values"):
            members = getattr(column, attr, None)
            if not members or not any(isinstance(m, bytes) for m in members):
                continue
            charset = charset_of(column) or "utf8mb4"
            try:
                decode = text_decoder("utf8mb4" if charset == "binary" else charset)
            except UnsupportedCharsetError:
                decode = text_decoder("utf8mb4")
            setattr(
                column,
                attr,
                [m if isinstance(m, str) else decode(m) for m in members],
            )


def _parse(self: Any, *args: Any, **kwargs: Any) -> None:
    """The library's parse, ENUM/SET members decoded by their column's character set."""
    _ORIGINAL_INIT(self, *args, **kwargs)
    _decode_members(self)


def _body_key(from_packet: Any, event_size: int, kwargs: dict[str, Any]) -> Any:
    """The event body's bytes plus the stream options the parse depends on; None when the
    packet is not in the shape this module knows (then nothing is cached)."""
    if from_packet._BinLogPacketWrapper__data_buffer:
        return None
    raw = from_packet.packet
    data, start = raw._data, raw._position
    if not isinstance(data, bytes) or start + event_size > len(data):
        return None
    options = tuple(
        tuple(v) if isinstance(v, list) else v
        for v in (
            kwargs.get("only_tables"),
            kwargs.get("ignored_tables"),
            kwargs.get("only_schemas"),
            kwargs.get("ignored_schemas"),
            kwargs.get("optional_meta_data"),
            kwargs.get("use_column_name_cache"),
        )
    )
    return data[start : start + event_size], options


def _init(
    self: Any,
    from_packet: Any,
    event_size: int,
    table_map: dict[int, Any],
    ctl_connection: Any,
    **kwargs: Any,
) -> None:
    key = None if kwargs.get("freeze_schema") else _body_key(from_packet, event_size, kwargs)
    found = _parsed.get(key) if key is not None else None
    if found is None:
        _parse(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        Stats.parsed += 1
        if key is not None and self._processed and self.complete:
            if len(_parsed) >= CACHE_LIMIT:
                _parsed.clear()
            _parsed[key] = {k: v for k, v in self.__dict__.items() if k not in _PER_EVENT}
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    self.__dict__.update(found)
    table_map[self.table_id] = self.table_obj
    Stats.reused += 1


def _numeric(self: Any, column_type: int) -> bool:
    """Whether the signedness bitmap has a bit for a column of `column_type` (the library's
    static test, which counts YEAR, made to depend on the server: see the module docstring)."""
    if column_type == FIELD_TYPE.YEAR and getattr(self, "dbms", "mysql") != "mariadb":
        return False
    return bool(_LIBRARY_NUMERIC(column_type))


def install(enabled: bool = True) -> None:
    """Route table map parsing through the cache (idempotent); `enabled=False` restores the
    library's own parse (tests compare the two)."""
    TableMapEvent.__init__ = _init if enabled else _parse
    TableMapEvent._read_type_values = _member_bytes
    TableMapEvent._is_numeric_column = _numeric
