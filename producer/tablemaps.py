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
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

CACHE_LIMIT = 10_000
"""Bodies kept; cleared when exceeded (a server with more live tables re-parses some)."""

_parsed: dict[tuple[bytes, tuple[Any, ...]], dict[str, Any]] = {}
_ORIGINAL_INIT = TableMapEvent.__init__
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
        _ORIGINAL_INIT(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
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


def install(enabled: bool = True) -> None:
    """Route table map parsing through the cache (idempotent); `enabled=False` restores the
    library's own parse (tests compare the two)."""
    TableMapEvent.__init__ = _init if enabled else _ORIGINAL_INIT
