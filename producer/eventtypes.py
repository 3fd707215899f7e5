"""Every binlog event type code, classified once: decoded, ignored (with why) or refused.

The reader fails closed. An event it cannot reproduce must stop it, never pass by: skipping a
compressed rows event loses its rows without a trace downstream. mysql-replication drops by
itself every event it has no class for (it filters ``NotImplementedEvent`` out by default), so
compressed events never reached the reader's refusals; this table is consulted by type code,
on every path, before the library decides anything (`rowbus.producer.binlog`).

Codes: MySQL's ``Log_event_type`` 0-42 (binlog_event.h, MySQL 8.4/9) and MariaDB's 160-171
(sql/log_event.h, 10.11/11.x); MariaDB's compressed Query and rows events (165-171) are
inflated into the ordinary events first (`rowbus.producer.compressed`), and MySQL's
Transaction_payload (40) unpacked into the events it holds (`rowbus.producer.payload`). A
code that is not here stops the reader too: a newer server's event is unknown, not harmless.
The "Binlog event types" section of docs/operations.md lists the ignored ones with the same
reasons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from rowbus.producer.exceptions import ServerMisconfiguredError


class Handling(Enum):
    DECODED = "decoded"
    IGNORED = "ignored"
    REFUSED = "refused"


@dataclass(frozen=True)
class EventType:
    name: str
    handling: Handling
    why: str = ""
    """IGNORED: why skipping it loses nothing. REFUSED: the setting, and what to change."""


_D, _I, _R = Handling.DECODED, Handling.IGNORED, Handling.REFUSED

PRE_V4 = (
    "written only by servers before MySQL 5.1 (binlog format v1-v3, pre-GA rows): rowbus "
    "reads binlog format v4; replicate this binlog into a MySQL 8.4 or MariaDB 10.11 server "
    "and read that one"
)
STATEMENT_CONTEXT = (
    "context of a statement-logged query (binlog_format STATEMENT or MIXED), which the query "
    "itself is refused or passed by for (README: Row images)"
)
LOAD_DATA_BLOCK = (
    "a block of a LOAD DATA file logged as a statement; its Execute_load_query event is "
    "refused on a table the reader reads"
)
EVENT_TYPES: dict[int, EventType] = {
    0: EventType("Unknown", _R, "type 0 is never written: the stream is corrupt"),
    1: EventType("Start_v3", _R, PRE_V4),
    2: EventType("Query", _D),
    3: EventType("Stop", _I, "the server stopped; the next file follows, no change is in it"),
    4: EventType("Rotate", _D),
    5: EventType("Intvar", _I, STATEMENT_CONTEXT),
    6: EventType("Load", _R, PRE_V4),
    7: EventType("Slave", _R, PRE_V4),
    8: EventType("Create_file", _R, PRE_V4),
    9: EventType("Append_block", _I, LOAD_DATA_BLOCK),
    10: EventType("Exec_load", _R, PRE_V4),
    11: EventType("Delete_file", _I, "ends a LOAD DATA that failed: nothing was written"),
    12: EventType("New_load", _R, PRE_V4),
    13: EventType("Rand", _I, STATEMENT_CONTEXT),
    14: EventType("User_var", _I, STATEMENT_CONTEXT),
    15: EventType("Format_description", _D),
    16: EventType("Xid", _D),
    17: EventType("Begin_load_query", _I, LOAD_DATA_BLOCK),
    18: EventType("Execute_load_query", _D),
    19: EventType("Table_map", _D),
    20: EventType("Pre_ga_write_rows", _R, PRE_V4),
    21: EventType("Pre_ga_update_rows", _R, PRE_V4),
    22: EventType("Pre_ga_delete_rows", _R, PRE_V4),
    23: EventType("Write_rows_v1", _D),
    24: EventType("Update_rows_v1", _D),
    25: EventType("Delete_rows_v1", _D),
    26: EventType(
        "Incident",
        _R,
        "the source logged an incident: changes may be missing from its binlog here (a "
        "failed binlog write, or a non-transactional change cut short); take a new snapshot "
        "of the tables and start the reader past this position",
    ),
    27: EventType("Heartbeat", _D),
    28: EventType("Ignorable", _I, "marked ignorable by the server: it carries no change"),
    29: EventType(
        "Rows_query", _I, "the statement's text beside its rows (binlog_rows_query_log_events)"
    ),
    30: EventType("Write_rows", _D),
    31: EventType("Update_rows", _D),
    32: EventType("Delete_rows", _D),
    33: EventType("Gtid", _D),
    34: EventType(
        "Anonymous_gtid",
        _I,
        "a transaction without GTID (gtid_mode=OFF); it is read by file:position, and "
        "`rowbus doctor` asks for gtid_mode=ON",
    ),
    35: EventType(
        "Previous_gtids",
        _I,
        "the GTIDs of the files before this one; the reader takes each transaction's own",
    ),
    36: EventType(
        "Transaction_context",
        _I,
        "group replication's certification data, exchanged between members, no change in it",
    ),
    37: EventType("View_change", _I, "a group replication membership change: no change in it"),
    38: EventType("Xa_prepare", _D),
    # binlog_row_value_options=PARTIAL_JSON: diffs applied to the before image (`jsondiff`).
    39: EventType("Partial_update_rows", _D),
    # binlog_transaction_compression=ON: unpacked into the events it holds first (`payload`).
    40: EventType("Transaction_payload", _D),
    41: EventType(
        "Heartbeat_v2",
        _I,
        "a heartbeat (MySQL 8.0.26+'s form for positions past 4 GiB): it carries no change",
    ),
    42: EventType("Gtid_tagged", _D),
    160: EventType(
        "Annotate_rows", _I, "the statement's text beside its rows (binlog_annotate_row_events)"
    ),
    161: EventType("Binlog_checkpoint", _I, "the server's crash-recovery marker: no change in it"),
    162: EventType("Gtid (MariaDB)", _D),
    163: EventType(
        "Gtid_list", _I, "the GTID state at the start of a file; each transaction has its own"
    ),
    164: EventType(
        "Start_encryption",
        _I,
        "encrypt_binlog=ON: the server decrypts the events after it before sending them to a "
        "replica, so the stream is plain (test_encrypted_binlog.py reads one on every path)",
    ),
    # log_bin_compress=ON: inflated into Query and rows events first (`compressed`).
    165: EventType("Query_compressed", _D),
    166: EventType("Write_rows_compressed_v1", _D),
    167: EventType("Update_rows_compressed_v1", _D),
    168: EventType("Delete_rows_compressed_v1", _D),
    169: EventType("Write_rows_compressed", _D),
    170: EventType("Update_rows_compressed", _D),
    171: EventType("Delete_rows_compressed", _D),
}

PASSED = frozenset(c for c, t in EVENT_TYPES.items() if t.handling is not Handling.REFUSED)
"""Codes the reader goes on after (decoded or ignored): one set lookup per event."""
IGNORED = frozenset(c for c, t in EVENT_TYPES.items() if t.handling is Handling.IGNORED)


def refusal(code: int, file: str, end: int) -> ServerMisconfiguredError:
    """The one line a refused or unknown event type stops the reader with, at `file:end`
    (the event's end: the position a reader resumes after)."""
    known = EVENT_TYPES.get(code)
    if known is None:
        return ServerMisconfiguredError(
            f"{file}:{end}: binlog event type {code} is unknown to this reader (not one of "
            "MySQL 8.4/9 or MariaDB 10.11/11): rows in it would be lost; upgrade rowbus, or "
            "turn off the server feature that writes it"
        )
    assert known.handling is Handling.REFUSED, code
    return ServerMisconfiguredError(f"{file}:{end}: {known.name} event (type {code}): {known.why}")


def _on(value: str) -> bool:
    return value.upper() in ("ON", "1")


@dataclass(frozen=True)
class RefusedSetting:
    """A server setting whose events the reader refuses: checked before the reader starts
    (`rowbus.producer.server.SourceServer.check`) and by `rowbus doctor`, so a reader stops
    before its expensive start-up and not only when it meets the first such event."""

    variable: str
    bad: Callable[[str], bool]
    wanted: str
    """What a good value is, as the doctor's check names it."""
    consequence: str
    fix: str


REFUSED_SETTINGS: tuple[RefusedSetting, ...] = ()
"""None at present. A server without a variable passes. Compression is not here: MariaDB's
compressed events (`rowbus.producer.compressed`) and MySQL's Transaction_payload
(`rowbus.producer.payload`) are decoded; nor is binlog_row_value_options=PARTIAL_JSON, whose
JSON diffs are applied to the before image (`rowbus.producer.jsondiff`)."""
