"""caching_sha2_password (MySQL 8's default) against an in-tree fake server: the pinned pymysql
does the fast path itself, so the reader's control connection and doctor connect; the full
authentication over a connection without TLS needs the 'cryptography' package (a dependency
now: `tests/integration/mysql8/test_auth.py` runs the RSA exchange), and an install without
it fails in one clear, non-retryable line (not a bare RuntimeError)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from rowbus.clients import mysql
from rowbus.clients.settings import SourceConnection
from rowbus.producer.exceptions import ServerMisconfiguredError
from rowbus.producer.server import SourceServer
from tests.unit.clients.fake_mysql import FakeServer, scramble


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    fake = FakeServer(b"s3cret", cached=getattr(request, "param", True))
    yield fake
    fake.close()


def source(fake: FakeServer, password: str = "s3cret") -> SourceConnection:
    return SourceConnection(
        name="m8", host="127.0.0.1", port=fake.port, user="rowbus", password=SecretStr(password)
    )


def test_the_fast_path_scramble_is_the_documented_one() -> None:
    assert scramble(b"", b"x" * 20) != scramble(b"a", b"x" * 20)
    assert len(scramble(b"pw", bytes(20))) == 32


def test_the_reader_connects_with_a_cached_password(server: FakeServer) -> None:
    with SourceServer(source(server)) as found:
        assert found.version == "8.4.3-fake"
        assert not found.mariadb
    assert "login rowbus" in server.seen


def test_a_wrong_password_is_access_denied(server: FakeServer) -> None:
    with pytest.raises(ServerMisconfiguredError, match="access denied"):
        SourceServer(source(server, "wrong")).connect()


@pytest.mark.parametrize("server", [False], indirect=True)
def test_full_authentication_without_cryptography_is_one_clear_line(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An install without 'cryptography' (pymysql's optional RSA dependency), as pymysql sees it.
    import pymysql._auth

    monkeypatch.setattr(pymysql._auth, "_have_cryptography", False)
    with pytest.raises(ServerMisconfiguredError) as failure:
        SourceServer(source(server)).connect()
    line = str(failure.value)
    assert "\n" not in line
    assert "caching_sha2_password" in line
    assert "cryptography" in line
    assert not failure.value.retryable
    assert mysql.classify(failure.value.__cause__) is mysql.Kind.DENIED  # type: ignore[arg-type]
