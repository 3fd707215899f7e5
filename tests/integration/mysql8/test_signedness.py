"""Unsigned columns after a YEAR column, from MySQL 8.4's table map (`tests.mysql8`): MySQL
gives YEAR no bit in the signedness bitmap (MariaDB does); mysql-replication counted it on
both, so on MySQL an INT UNSIGNED after a YEAR read 4294967295 as -1. Every decoding path."""

from __future__ import annotations

import pytest

from rowbus.clients.settings import SourceConnection
from rowbus.producer.assembler import Rows
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.tables import TableFilter
from tests.mysql8.binlog import Binlog, Change, Table, Transaction
from tests.mysql8.primary import Primary
from tests.mysql8.rows import column

PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}


@pytest.mark.parametrize("path", list(PATHS))
def test_unsigned_columns_after_a_year_keep_their_values(path: str) -> None:
    log = Binlog()
    columns = [
        column("id", "INT", primary=True),
        column("y", "YEAR"),
        column("n", "INT UNSIGNED"),
        column("s", "SMALLINT"),
        column("b", "BIGINT UNSIGNED"),
    ]
    row = (1, 2000, 4294967295, -5, 18446744073709551615)
    log.add([Transaction([Change(Table("shop", "t", columns, 70), None, row)])])
    fast, framed = PATHS[path]
    with Primary(log) as server:
        stream = BinlogStream(
            SourceConnection(
                name="m8", host="127.0.0.1", port=server.port, user="repl", password="s3cret"
            ),
            9,
            "binlog.000001",
            4,
            TableFilter(),
            blocking=False,
            fast=fast,
            framed=framed,
        )
        try:
            images = [i for e in stream.events() if isinstance(e, Rows) for i in e.decode()]
        finally:
            stream.close()
    assert images == [(None, row)]
