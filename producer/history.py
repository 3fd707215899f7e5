"""Whether a source server still holds the history up to a checkpoint of its own (the same
server identity): `RESET MASTER` (MySQL 8.4: `RESET BINARY LOGS AND GTIDS`) empties the binlog
and the written GTIDs and starts again at file 1, so the checkpoint's file/offset either no
longer exists or names some other event, and order keys taken from the new files would go back.

Purging old files is not a reset (`SourceServer.ensure_available` reports it): the files left
keep their names and the GTIDs written stay written.
"""

from __future__ import annotations

import re

from rowbus.producer.exceptions import PositionPurgedError
from rowbus.producer.server import SourceServer
from rowbus.protocol.events import BinlogPosition

_NUMBER = re.compile(r"\.(\d+)$")


class BinlogResetError(PositionPurgedError):
    """The checkpoint's own server reset its binlog since (RESET MASTER): the checkpoint's
    position is gone or names another event."""


def _number(file: str) -> int:
    m = _NUMBER.search(file)
    return int(m.group(1)) if m else -1


def reset_reason(
    server: SourceServer, position: BinlogPosition, gtid_set: str | None
) -> str | None:
    """Why `server` cannot hold the history up to the checkpoint (`position`, `gtid_set`), or
    None when it may. GTIDs decide when the checkpoint has some; without them, a checkpoint file
    newer than the server's newest, or an offset past a file's end, gives the reset away."""
    if gtid_set:
        missing = server.missing_gtids(gtid_set)
        if missing:
            return f"it has not written GTIDs {missing} of the checkpoint"
    logs = server.binary_logs()
    if not logs:
        return None
    sizes = dict(logs)
    newest = logs[-1][0]
    if position.file in sizes and sizes[position.file] < position.offset:
        return (
            f"{position.file} now ends at {sizes[position.file]}, before offset {position.offset}"
        )
    if position.file not in sizes and _number(position.file) > _number(newest):
        return f"its newest binlog is {newest}"
    return None


def check_history(server: SourceServer, position: BinlogPosition, gtid_set: str | None) -> None:
    """BinlogResetError, in one line with what to change, when the server's history was reset
    since the checkpoint."""
    reason = reset_reason(server, position, gtid_set)
    if reason is None:
        return
    logs = server.binary_logs()
    begins = f"{logs[0][0]}:4" if logs else "nothing"
    raise BinlogResetError(
        f"{server.where}: the binlog was reset (RESET MASTER) since checkpoint {position} "
        f"gtid={gtid_set or '-'}: {reason} (it now begins at {begins}); set "
        "reader.snapshot: when_needed to take a fresh snapshot and continue at the next "
        "upstream epoch, or remove the source's checkpoint and start with reader.start "
        "(changes in between are lost to subscribers)"
    )
