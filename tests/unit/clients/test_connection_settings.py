"""The MySQL connection settings: TLS combinations refused in one line, one password source,
replicas inheriting the source's TLS and password, a child's configuration keeping a password
file or variable by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rowbus.clients.settings import (
    MySQLConnection,
    ServerAddress,
    SourceConnection,
    TlsSettings,
)
from rowbus.config import load_settings
from rowbus.spark_apply.settings import JobConfig


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"mode": "off", "ca": "ca.pem"}, "tls.mode is off, so tls.ca, tls.cert and tls.key"),
        ({"key": "k.pem"}, "tls.key is set without tls.cert"),
        ({"verify_hostname": True}, "tls.verify_hostname needs tls.ca"),
        ({"mode": "on"}, "'required', 'preferred' or 'off'"),
    ],
)
def test_inconsistent_tls_settings_are_refused(tls: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TlsSettings.model_validate(tls)


def test_a_bare_yaml_off_is_the_off_mode(tmp_path: Path) -> None:
    path = tmp_path / "rowbus.yaml"
    path.write_text("sink: {tls: {mode: off}}\n")
    assert load_settings(path).resolved_sink.tls.mode == "off"


def test_tls_defaults_are_preferred_and_the_hostname_checked_with_a_ca() -> None:
    assert TlsSettings().mode == "preferred" and not TlsSettings().required
    # a CA with the mode left unset asks for TLS (MySQL's --ssl-ca); an explicit mode decides
    assert TlsSettings(ca=Path("ca.pem")).required
    assert not TlsSettings(ca=Path("ca.pem"), mode="preferred").required
    assert TlsSettings(mode="required").required
    assert not TlsSettings().checks_hostname
    assert TlsSettings(ca=Path("ca.pem")).checks_hostname
    assert not TlsSettings(ca=Path("ca.pem"), verify_hostname=False).checks_hostname


def test_only_one_password_source() -> None:
    with pytest.raises(ValidationError, match="set only one of password, password_file"):
        MySQLConnection.model_validate({"password": "x", "password_file": "/p"})
    with pytest.raises(ValidationError, match="set only one of password_file, password_env"):
        MySQLConnection.model_validate({"password_file": "/p", "password_env": "P"})


def test_the_password_is_read_when_a_connection_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("first\n")
    from_file = MySQLConnection(password_file=secret)
    assert from_file.secret() == "first"
    secret.write_text("rotated\r\n")
    assert from_file.secret() == "rotated"
    monkeypatch.setenv("DB_PW", "from-env")
    assert MySQLConnection(password_env="DB_PW").secret() == "from-env"
    assert MySQLConnection().secret() == "rowbus"


def test_replicas_keep_the_sources_tls_and_password() -> None:
    source = SourceConnection(
        name="s",
        password_env="DB_PW",
        tls=TlsSettings(mode="required", ca=Path("ca.pem")),
        replicas=(ServerAddress(host="replica"),),
    )
    replica = source.servers()[1]
    assert (replica.host, replica.tls, replica.password_env) == ("replica", source.tls, "DB_PW")


def test_the_job_config_keeps_a_password_file_by_name() -> None:
    sink = MySQLConnection(password_file=Path("/run/secrets/sink"), tls=TlsSettings(mode="off"))
    data = json.loads(JobConfig(sink=sink).dump())
    assert "password" not in data["sink"]
    assert data["sink"]["password_file"] == "/run/secrets/sink"
    assert JobConfig.model_validate(data).sink == sink
    inline = json.loads(JobConfig(sink=MySQLConnection(password="inline")).dump())
    assert inline["sink"]["password"] == "inline"
