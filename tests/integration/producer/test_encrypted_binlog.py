"""A MariaDB source with encrypt_binlog=ON (file_key_management): its binlog files are encrypted
on disk, but the server decrypts the events before sending them to a replica, so every decoding
path reads them as from a plain binlog; the Start_encryption event in the stream is ignored
(`rowbus.producer.eventtypes`)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from rowbus.config import MySQLSettings, Settings
from rowbus.local.procs import ProcessRecord, launch, port_is_free
from rowbus.local.services import MariaDB
from rowbus.producer.assembler import Rows
from rowbus.producer.tables import TableFilter
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.test_fastpath import _stream
from tests.integration.producer.test_upstream_switch import _free_port

PATHS = {"framed": (True, True), "native": (True, False), "pure": (False, False)}
SECRET = "a value that must not be on disk in clear"


@pytest.fixture(scope="module")
def encrypted_source(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MySQLSettings, Path]]:
    """A private MariaDB writing an encrypted binlog; (its settings, its binlog folder)."""
    home = tmp_path_factory.mktemp("encrypted")
    keys = home / "keys.txt"
    keys.write_text(f"1;{secrets.token_hex(32)}\n")
    port = _free_port()
    assert port_is_free(port)
    server = MariaDB(
        "encrypted",
        port,
        "test.encrypted",
        home / "server",
        server_id=93,
        binlog=True,
        extra=(
            "--plugin-load-add=file_key_management",
            f"--file-key-management-filename={keys}",
            "--encrypt-binlog=ON",
        ),
    )
    server.prepare()
    record = ProcessRecord(
        server.name, launch(server.command(), server.log_file), server.marker, server.address
    )
    try:
        wait_for(server.ready, timeout=120, what="the encrypted-binlog server to start")
        server.after_ready()
        yield services.sources[0].model_copy(update={"port": port}), home / "server" / "binlog"
    finally:
        server.shutdown(record)


@pytest.mark.parametrize("path", list(PATHS))
def test_an_encrypted_binlog_is_read_on_every_path(
    encrypted_source: tuple[MySQLSettings, Path], path: str
) -> None:
    server, binlogs = encrypted_source
    db = f"enc_{path}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@encrypt_binlog")
        assert cur.fetchone() == (1,)
        cur.execute("SHOW MASTER STATUS")
        start = cur.fetchone()
        assert start is not None
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(60))")
        cur.execute(f"INSERT INTO `{db}`.t VALUES (1, %s), (2, 'two')", (SECRET,))
        cur.execute(f"UPDATE `{db}`.t SET v = 'changed' WHERE id = 2")
        cur.execute(f"DELETE FROM `{db}`.t WHERE id = 1")
    on_disk = b"".join(f.read_bytes() for f in binlogs.glob("binlog.0*"))
    assert SECRET.encode() not in on_disk, "the binlog is not encrypted"
    fast, framed = PATHS[path]
    stream = _stream(
        server, (str(start[0]), int(start[1])), TableFilter(include_schemas=[db]), fast, framed
    )
    changes = []
    try:
        for event in stream.events():
            if isinstance(event, Rows):
                changes += [(event.op.value, b, a) for b, a in event.decode()]
    finally:
        stream.close()
    assert changes == [
        ("insert", None, (1, SECRET)),
        ("insert", None, (2, "two")),
        ("update", (2, "two"), (2, "changed")),
        ("delete", (1, SECRET), None),
    ]
