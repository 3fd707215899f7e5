"""What a reader publishes to define a table (PROTOCOL.md §9.5 item 6, §9.6), for tests that
count DDLs or transactions: a ``CREATE DATABASE`` / ``CREATE TABLE … IF NOT EXISTS`` made from
the source's ``SHOW CREATE``, before the first row of a table the stream has not defined
(a reader started with ``snapshot: never`` on tables that already exist)."""

from __future__ import annotations

from rowbus.merge.transaction import Transaction
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import DdlChange

_KINDS = (DdlKind.CREATE_DATABASE, DdlKind.CREATE_TABLE)


def is_definition(event: object) -> bool:
    return (
        isinstance(event, DdlChange)
        and event.kind in _KINDS
        and "IF NOT EXISTS" in event.statement.upper()
    )


def is_definition_txn(txn: Transaction) -> bool:
    return txn.is_ddl and all(is_definition(e) for e in txn.events)
