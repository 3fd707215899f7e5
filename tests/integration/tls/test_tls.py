"""Every kind of MySQL connection rowbus opens, over TLS to a MariaDB with TLS on: the reader's
binlog stream and control connection, the doctor, the sink as the apply job's driver and
executors use it, verify; and the failures a user meets, each one line naming the setting."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml

from rowbus.clients import mysql
from rowbus.clients.settings import TlsSettings
from rowbus.config import Settings
from rowbus.doctor.mysql import check_sink, check_source
from rowbus.producer import dumpframes
from rowbus.producer.assembler import Rows
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.server import SourceServer
from rowbus.producer.tables import TableFilter
from rowbus.protocol.events import Op
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.planner import PlannerState, plan
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.shard_writes import ShardWrite, write_shard
from rowbus.spark_apply.sink import MySQLSink
from rowbus.verify import verify
from tests.integration.spark_apply.test_sink import EXPECTED, batch
from tests.integration.tls.conftest import TlsServer
from tests.unit.spark_apply.events import resolved, row, table


def cipher(conn: Any) -> str:
    """The TLS cipher of a connection's session, as the server sees it ('' when plain)."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        found = cur.fetchone()
    return str(found[1] if isinstance(found, tuple) else found["Value"]) if found else ""


@pytest.fixture
def database(tls_server: TlsServer) -> Iterator[str]:
    name = f"tls_{uuid.uuid4().hex[:10]}"
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    yield name
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def make_user(tls_server: TlsServer) -> Iterator[Callable[[str, str], str]]:
    """`make_user(require, grants)`: a new user with the password 'pw-<name>', created
    ``REQUIRE <require>`` and granted `grants` ON *.*; dropped afterwards."""
    made: list[str] = []

    def make(require: str, grants: str) -> str:
        name = f"u{uuid.uuid4().hex[:10]}"
        with tls_server.root() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw-{name}' REQUIRE {require}")
            cur.execute(f"GRANT {grants} ON *.* TO '{name}'@'%'")
        made.append(name)
        return name

    yield make
    with tls_server.root() as conn, conn.cursor() as cur:
        for name in made:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def test_the_reader_streams_rows_over_verified_tls(
    tls_server: TlsServer, database: str, make_user: Callable[[str, str], str]
) -> None:
    # A user the server refuses on any connection that does not show the client certificate:
    # the stream and the library's control connection must both carry the source's TLS
    # settings for the rows to arrive.
    user = make_user("X509", "REPLICATION SLAVE, BINLOG MONITOR, SELECT")
    certs = tls_server.certs
    source = tls_server.source(
        user, mode="required", ca=certs.ca, cert=certs.client_cert, key=certs.client_key
    )
    with mysql.connect(source) as conn, conn.cursor() as cur:
        assert cipher(conn)
        start = mysql.binlog_position(cur)
        assert start is not None
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO `{database}`.t VALUES (1, 'one'), (2, 'two')")
    stream = BinlogStream(
        source, 7_000_000, *start, TableFilter(include_schemas=[database]), blocking=False
    )
    rows = []
    framed = dumpframes.Stats.packets
    try:
        for event in stream.events():
            if isinstance(event, Rows):
                rows += [after for _before, after in event.decode()]
        control = stream._reader._ctl_connection  # type: ignore[union-attr]
        assert cipher(control), "the library's control connection is not encrypted"
    finally:
        stream.close()
    assert rows == [(1, "one"), (2, "two")]
    # the framed fast path, which reads the connection's buffered file itself, read TLS too
    assert dumpframes.Stats.packets > framed


def test_required_against_a_server_without_tls_fails_in_one_line(
    services: Settings, tls_server: TlsServer
) -> None:
    plain = services.sources[0]
    with mysql.connect(plain) as conn:
        assert cipher(conn) == "", "the embedded source offers TLS: this test needs one that not"
    required = plain.model_copy(update={"tls": TlsSettings(mode="required")})
    with pytest.raises(ServerMisconfiguredError) as failure:
        SourceServer(required).connect()
    text = str(failure.value)
    assert "\n" not in text
    assert f"tls.mode is required but the server {plain.address} does not offer TLS" in text
    # a CA with the mode left unset asks for a verified server, which a plain one cannot be
    ca = tls_server.certs.ca
    with pytest.raises(pymysql.err.OperationalError, match=r"tls\.ca is set but the server"):
        mysql.connect(plain.model_copy(update={"tls": TlsSettings(ca=ca)}))
    # preferred (the default) goes on in plain text with the same server, a CA or not
    for tls in (TlsSettings(), TlsSettings(mode="preferred", ca=ca)):
        with mysql.connect(plain.model_copy(update={"tls": tls})) as conn:
            assert cipher(conn) == ""


def test_a_certificate_that_does_not_verify_fails_in_one_line(tls_server: TlsServer) -> None:
    wrong = tls_server.source(mode="required", ca=tls_server.certs.other_ca)
    with pytest.raises(ServerMisconfiguredError) as failure:
        SourceServer(wrong).connect()
    text = str(failure.value)
    assert "\n" not in text
    assert "certificate verify failed (self-signed certificate in certificate chain)" in text
    assert f"tls.ca {tls_server.certs.other_ca}" in text and "for host 127.0.0.1" in text
    assert not failure.value.retryable if hasattr(failure.value, "retryable") else True
    # preferred with the wrong CA does not fall back to plain text either: a CA is a demand
    with pytest.raises(pymysql.err.OperationalError) as preferred:
        mysql.connect(tls_server.source(mode="preferred", ca=tls_server.certs.other_ca))
    assert mysql.classify(preferred.value) is mysql.Kind.TLS
    # the same server and CA pass when the host matches the certificate
    with mysql.connect(tls_server.source()) as conn:
        assert cipher(conn)


def test_a_user_required_to_show_a_certificate_needs_the_client_certificate(
    tls_server: TlsServer, make_user: Callable[[str, str], str]
) -> None:
    user = make_user("X509", "SELECT")
    certs = tls_server.certs
    without = tls_server.source(user)
    with pytest.raises(pymysql.err.OperationalError) as denied:
        mysql.connect(without)
    assert mysql.classify(denied.value) is mysql.Kind.DENIED
    tls = TlsSettings(mode="required", ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
    with mysql.connect(without.model_copy(update={"tls": tls})) as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == (f"{user}@%",)
        assert cipher(conn)


def test_the_doctor_reports_the_encryption_of_a_source_and_the_sink(
    tls_server: TlsServer, services: Settings
) -> None:
    version, checks = check_source(tls_server.source())
    assert "MariaDB" in version
    by_name = {c.name: c for c in checks}
    tls = by_name["TLS"]
    assert tls.ok, tls
    assert "certificate verified against tls.ca and the host name" in tls.detail
    assert "TLS" in tls.detail  # the protocol version, e.g. TLSv1.3
    _version, sink_checks = check_sink(tls_server.source(mode="preferred"), "rowbus_apply")
    assert [c.verdict for c in sink_checks[:2]] == ["PASS", "PASS"]  # connect, TLS
    assert "certificate not verified (no tls.ca)" in sink_checks[1].detail
    # a plain server off loopback is a warning, with what to change
    _version, wrong = check_source(tls_server.source(mode="required", ca=tls_server.certs.other_ca))
    assert [(c.name, c.verdict) for c in wrong] == [("connect", "FAIL")]
    assert "check the tls settings" in wrong[0].fix
    out = io.StringIO()
    from rowbus.doctor.report import print_section

    print_section("sink", sink_checks, out)
    assert "PASS  TLS: TLSv1" in out.getvalue()


def test_the_sink_over_tls_on_the_driver_and_on_the_executors(
    tls_server: TlsServer,
    database: str,
    make_user: Callable[[str, str], str],
    tmp_path: Any,
) -> None:
    """Parallel mode with every shard pickled and written as an executor would: the sink's
    TLS settings (with a client certificate the user is created to require) and its password
    file travel with the shard, the password itself does not."""
    user = make_user("X509", "ALL PRIVILEGES")
    certs = tls_server.certs
    password_file = tmp_path / "sink-password"
    password_file.write_text(f"pw-{user}\n")
    sink = SinkConnection(
        host="127.0.0.1",
        port=tls_server.port,
        user=user,
        password_file=password_file,
        tls=TlsSettings(mode="required", ca=certs.ca, cert=certs.client_cert, key=certs.client_key),
    )
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id BIGINT PRIMARY KEY, v VARCHAR(20))")
    up = table("up", "t")
    router = Router([RouteSettings(match="up.*", target=f"{database}.{{table}}")], "error")
    applier = MySQLSink(
        sink, "tls-job", f"{database}_state", router, {up.schema_id: up}.get, "parallel", 2
    )
    shipped: list[bytes] = []

    def executors(writes: list[ShardWrite]) -> None:
        for w in writes:
            blob = pickle.dumps(w)
            shipped.append(blob)
            assert write_shard(pickle.loads(blob)) == w.rows

    applier.remote = executors
    events = batch(
        *(row(i, Op.INSERT, after=(i, f"v{i}"), tbl=up) for i in range(1, 9)), resolved(9)
    )
    with applier:
        assert applier.apply(0, plan(PlannerState(), events, EXPECTED)) == 8
    assert shipped, "no shard went to the executors"
    assert not any(f"pw-{user}".encode() in blob for blob in shipped)
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{database}`.t")
        assert cur.fetchone() == (8,)


def test_verify_compares_over_tls(
    tls_server: TlsServer,
    services: Settings,
    database: str,
    make_user: Callable[[str, str], str],
) -> None:
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO `{database}`.t VALUES (1, 1), (2, 2)")
    certs = tls_server.certs
    user = make_user("X509", "SELECT")  # refused without the client certificate
    source = tls_server.source(
        user, mode="required", ca=certs.ca, cert=certs.client_cert, key=certs.client_key
    )
    settings = services.model_copy(update={"sources": (source,), "sink": source})
    [diff] = verify(settings, [], [database])
    assert diff.equal and diff.source_rows == 2, diff


def test_a_sink_certificate_that_does_not_verify_is_refused_before_spark_starts(
    services: Settings, tls_server: TlsServer, tmp_path: Path
) -> None:
    """`rowbus apply` with a sink whose certificate does not verify: one line naming tls.ca
    and the host, before Spark starts (issue #33)."""
    other_ca = tls_server.certs.other_ca
    config = tmp_path / "rowbus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
                "sources": [{"name": s.name, "port": s.port} for s in services.sources],
                "sink": {
                    "host": "127.0.0.1",
                    "port": tls_server.port,
                    "tls": {"mode": "required", "ca": str(other_ca)},
                },
            }
        )
    )
    began = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "rowbus", "-c", str(config), "apply", "--available-now"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"rowbus: error: connecting to the sink 127.0.0.1:{tls_server.port}: ")
    assert "certificate verify failed (self-signed certificate in certificate chain)" in line
    assert f"tls.ca {other_ca}" in line and "for host 127.0.0.1" in line
    assert time.monotonic() - began < 20, "refused before any Spark start-up"
