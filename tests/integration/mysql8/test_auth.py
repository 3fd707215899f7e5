"""The reader's connection to a MySQL 8.4 primary (`tests.mysql8`): caching_sha2_password's
full authentication (the RSA exchange over plain TCP, the password in clear over TLS) and then
its fast path, the one line a wrong password, a missing grant or a setting that loses data
gives at start-up, and the doctor's source checks."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from rowbus.clients.settings import SourceConnection, TlsSettings
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.server import SourceServer
from rowbus.waiting import wait_for
from tests.integration.tls.conftest import Certificates, make_certificates
from tests.mysql8.binlog import Binlog
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
