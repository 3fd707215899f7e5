"""What creates a table where it is missing, and where the reader places events it makes.

A consumer writing into an empty database needs a table's definition before its first row
(PROTOCOL.md §9.5 item 6 for snapshots, §9.6 for streamed rows). The definition is the source
server's own text: ``SHOW CREATE DATABASE`` and ``SHOW CREATE TABLE``, each with IF NOT EXISTS.

Events the reader makes itself (snapshot rows and definitions) carry binlog positions too, and
must never share an order key with a streamed event (PROTOCOL.md §9 step 4 would drop one as a
replay). A streamed event's offset is the *end* of its binlog event, and every binlog event is
at least `MIN_EVENT_BYTES` long, so no streamed event ends just after a transaction boundary or
just before the end of an event: `just_after` and `just_before` are offsets only the reader's
own events use.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pymysql

from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.protocol.events import BinlogPosition

MIN_EVENT_BYTES = 19
"""An event header's size (binlog format v4): the least a binlog event can take."""


_GONE = (1049, 1146)
"""ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE."""


def just_after(boundary: BinlogPosition) -> BinlogPosition:
    """A position after every event ending at or before `boundary` (a transaction end) and
    before every event after it: an incremental snapshot chunk read at `boundary`."""
    return replace(boundary, offset=boundary.offset + 1)


def just_before(first: BinlogPosition) -> BinlogPosition:
    """A position after the transaction before the event ending at `first` (the first event
    of a transaction: at least a GTID or BEGIN event lies between) and before that event."""
    return replace(first, offset=first.offset - 1)


def create_statements(cursor: Any, schema: str, table: str) -> list[str]:
    """The database's and the table's CREATE … IF NOT EXISTS as the server shows them now;
    empty when the table is gone (a reader behind its DROP)."""
    db = schema.replace("`", "``")
    name = table.replace("`", "``")
    try:
        cursor.execute(f"SHOW CREATE DATABASE `{db}`")
        row = cursor.fetchone()
        database = str(row[1]) if row else f"CREATE DATABASE `{db}`"
        cursor.execute(f"SHOW CREATE TABLE `{db}`.`{name}`")
        row = cursor.fetchone()
    except pymysql.MySQLError as exc:
        if exc.args and exc.args[0] in _GONE:
            return []
        raise
    create = str(row[1]) if row else ""
    return [
        _if_not_exists(database, "CREATE DATABASE "),
        _if_not_exists(create, "CREATE TABLE "),
    ]


def _if_not_exists(statement: str, head: str) -> str:
    if statement[: len(head)].upper() != head:
        raise ServerMisconfiguredError(f"unexpected definition: {statement[:80]}")
    return f"{head}IF NOT EXISTS {statement[len(head) :]}"
