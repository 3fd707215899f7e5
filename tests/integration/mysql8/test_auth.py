"""The reader's connection to a MySQL 8.4 primary (`tests.mysql8`): caching_sha2_password's
full authentication (the RSA exchange over plain TCP, the password in clear over TLS) and then
its fast path, the one line a wrong password, a missing grant or a setting that loses data
gives at start-up, the one line a purged position gives, and the doctor's source checks."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rowbus.clients.settings import SourceConnection, TlsSettings
from rowbus.config import Settings
from rowbus.producer.exceptions import PositionPurgedError, ServerMisconfiguredError
from rowbus.producer.server import SourceServer
from rowbus.waiting import wait_for
from tests.integration.tls.conftest import Certificates, make_certificates
from tests.mysql8.binlog import Binlog, Transaction
from tests.mysql8.primary import Primary


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("mysql8-certs"))


def _source(
    server: Primary, password: str = "s3cret", tls: TlsSettings | None = None
) -> SourceConnection:
    return SourceConnection(
        name="m8",
        host="127.0.0.1",
        port=server.port,
        user="repl",
        password=password,
        tls=tls or TlsSettings(mode="off"),
    )


@pytest.fixture
def plain() -> Iterator[Primary]:
    with Primary(Binlog()) as server:
        yield server


def _logins(server: Primary, expected: list[str]) -> None:
    """The primary records a login once its reply is sent: the client may be first."""
    wait_for(lambda: server.seen.logins == expected, timeout=10, what=f"logins {expected}")


def _check(source: SourceConnection) -> str:
    with SourceServer(source) as server:
        server.check()
        return server.identity()


def test_full_authentication_over_plain_tcp_runs_the_rsa_exchange_then_the_fast_path(
    plain: Primary,
) -> None:
    assert _check(_source(plain)) == plain.variables["server_uuid"]
    _check(_source(plain))
    _logins(plain, ["repl rsa", "repl fast"])


def test_full_authentication_over_tls_sends_the_password_in_clear_inside_tls(
    certificates: Certificates,
) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.server_cert, certificates.server_key)
    tls = TlsSettings(mode="required", ca=Path(certificates.ca))
    with Primary(Binlog(), tls=context) as server:
        _check(_source(server, tls=tls))
        _check(_source(server, tls=tls))
        _logins(server, ["repl clear", "repl fast"])


def test_a_wrong_password_is_one_line_naming_the_setting(plain: Primary) -> None:
    with pytest.raises(ServerMisconfiguredError) as caught:
        _check(_source(plain, password="wrong"))
    text = str(caught.value)
    assert "Access denied for user 'repl'" in text
    assert "check user and password" in text and "\n" not in text
    _logins(plain, ["refused"])


def test_a_missing_replication_grant_is_one_line_naming_the_grant() -> None:
    with Primary(Binlog(), grants="SELECT") as server:
        with pytest.raises(ServerMisconfiguredError) as caught:
            _check(_source(server))
    text = str(caught.value)
    assert "lacks REPLICATION SLAVE, REPLICATION CLIENT" in text and "\n" not in text


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata=FULL"),
        ("binlog_row_image", "MINIMAL", "binlog_row_image=FULL"),
    ],
)
def test_mysql8_defaults_that_lose_data_stop_the_start_up_in_one_line(
    variable: str, value: str, named: str
) -> None:
    with Primary(Binlog(), variables={variable: value}) as server:
        with pytest.raises(ServerMisconfiguredError) as caught:
            _check(_source(server))
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_the_doctor_reports_mysql8s_minimal_row_metadata_and_supported_compression() -> None:
    """`rowbus doctor`'s source checks against MySQL 8.4: the default
    binlog_row_metadata=MINIMAL fails with what to change; transaction compression passes,
    saying its events are decoded; every statement it sends is one 8.4 answers."""
    from rowbus.config import MySQLSettings
    from rowbus.doctor.mysql import check_source

    variables = {"binlog_row_metadata": "MINIMAL", "binlog_transaction_compression": "ON"}
    grants = "SELECT, REPLICATION SLAVE, REPLICATION CLIENT"
    with Primary(Binlog(), variables=variables, grants=grants) as server:
        settings = MySQLSettings(host="127.0.0.1", port=server.port, user="repl", password="s3cret")
        version, checks = check_source(settings)
        assert not server.seen.unanswered, server.seen.unanswered
    assert version == "MySQL 8.4.3"
    failed = {c.name: c for c in checks if not c.ok}
    assert set(failed) == {"binlog_row_metadata=FULL"}, failed
    assert failed["binlog_row_metadata=FULL"].fix == "set binlog_row_metadata=FULL"
    passed = {c.name: c.detail for c in checks if c.ok}
    assert passed["binlog_transaction_compression ON or OFF"] == (
        "is ON: compressed events are decoded"
    )


MYSQL_PURGED = (
    "Cannot replicate because the source purged required binary logs. Replicate the missing "
    "transactions from elsewhere, or provision a new replica from backup. Consider increasing "
    "the source's binary log expiration period. The GTID set sent by the replica is '', and "
    "the missing transactions are '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'"
)
"""MySQL 8.4's text of error 1236 for a dump whose GTIDs it purged (ER_SOURCE_HAS_PURGED_
REQUIRED_GTIDS, sent as ER_MASTER_FATAL_ERROR_READING_BINLOG)."""


@pytest.mark.parametrize(
    ("start", "dump_error", "position"),
    [
        ("file:binlog.000001:4", MYSQL_PURGED, "binlog.000001:4"),
        ("file:binlog.000009:4", None, "binlog.000009:4"),
    ],
    ids=["purged-gtids", "missing-file"],
)
def test_a_purged_position_stops_the_reader_in_one_line_naming_reader_start(
    services: Settings,
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    start: str,
    dump_error: str | None,
    position: str,
) -> None:
    """The dump's error 1236 as MySQL sends it (purged GTIDs), or a start file the source no
    longer lists: the reader stops, fatal, with one line naming the position and
    reader.start."""
    from tests.integration.mysql8.test_reader import ReaderThread, setup_for

    log = Binlog()
    log.add([Transaction(ddl="CREATE DATABASE `gone`")])
    with Primary(log, dump_error=dump_error) as server:
        setup = setup_for(services, server, "gone", make_topic, unique)
        with ReaderThread(setup, start=start, snapshot="never") as r:
            wait_for(lambda: r.error is not None, timeout=60, what="the reader to stop")
    assert isinstance(r.error, PositionPurgedError), r.error
    text = str(r.error)
    assert "\n" not in text and position in text, text
    assert "reader.start=earliest" in text, text
    if dump_error is not None:
        assert "purged required binary logs" in text, text
