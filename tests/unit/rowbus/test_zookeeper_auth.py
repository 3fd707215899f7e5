"""``zookeeper.auth``: read from the file, a variable or inline, never shown, handed to every
component that opens a ZooKeeper session (reader, apply job), and rendered for kazoo only at the
seam."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.security import make_digest_acl

from rowbus.cli import main
from rowbus.clients.errors import SecretUnavailableError
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.clients.zookeeper import _credentials, start_client
from rowbus.commands.reader import _services
from rowbus.config import load_settings
from rowbus.exceptions import ConfigError
from rowbus.jobs import job_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rowbus.yaml"
    path.write_text(text)
    return path


def test_a_password_from_a_file_or_a_variable_is_read_when_a_session_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "zk"
    secret.write_text("from-file\n")
    path = _write(tmp_path, f"zookeeper:\n  auth: {{user: rb, password_file: {secret}}}\n")
    auth = load_settings(path).zookeeper.auth
    assert auth is not None and auth.secret() == "from-file"
    secret.write_text("rotated\n")
    assert auth.secret() == "rotated"

    monkeypatch.setenv("RB_ZK_PASSWORD", "from-env")
    by_env = ZooKeeperAuth(user="rb", password_env="RB_ZK_PASSWORD")
    assert _credentials(by_env) == {
        "auth_data": [("digest", "rb:from-env")],
        "default_acl": [make_digest_acl("rb", "from-env", all=True)],
    }
    assert _credentials(None) == {}
    monkeypatch.delenv("RB_ZK_PASSWORD")
    with pytest.raises(SecretUnavailableError, match="password_env names RB_ZK_PASSWORD") as e:
        by_env.secret()
    assert "zookeeper.auth" in str(e.value)
    # Refused before any connection is tried (nothing listens on port 9).
    with pytest.raises(SecretUnavailableError, match="password_env names RB_ZK_PASSWORD"):
        start_client("127.0.0.1:9", 5.0, auth=by_env)


@pytest.mark.parametrize(
    ("auth", "refusal"),
    [
        ("{user: rb}", "needs one of password, password_file, password_env"),
        ("{user: rb, password: a, password_env: B}", "set only one of password, password_env"),
        ("{user: 'r:b', password: a}", "zookeeper.auth.user"),
    ],
)
def test_bad_credentials_settings_are_one_line(tmp_path: Path, auth: str, refusal: str) -> None:
    path = _write(tmp_path, f"zookeeper:\n  auth: {auth}\n")
    with pytest.raises(ConfigError, match=refusal) as caught:
        load_settings(path)
    assert "\n" not in str(caught.value)


def test_the_password_is_never_shown_and_reaches_every_component(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "zookeeper:\n  auth: {user: rb, password: hunter2}\n")
    assert main(["-c", str(path), "config", "show"]) == 0
    shown = capsys.readouterr().out
    assert "hunter2" not in shown
    assert 'zookeeper.auth.user: "rb"' in shown
    settings = load_settings(path)
    assert "hunter2" not in repr(settings)
    assert _services(settings).zookeeper_auth == settings.zookeeper.auth
    config = job_config(settings)
    assert config.zookeeper_auth == settings.zookeeper.auth
    assert "hunter2" not in repr(config)
    # The job's own configuration file (mode 0600) is the one place an inline password is
    # written out, as the sink's is: the driver has no other way to learn it.
    assert json.loads(config.dump())["zookeeper_auth"]["password"] == "hunter2"

    monkeypatch.setenv("RB_ZK", "x")
    by_name = settings.model_copy(
        update={
            "zookeeper": settings.zookeeper.model_copy(
                update={"auth": ZooKeeperAuth(user="rb", password_env="RB_ZK")}
            )
        }
    )
    dumped = json.loads(job_config(by_name).dump())["zookeeper_auth"]
    assert dumped == {"user": "rb", "password_env": "RB_ZK", "password_file": None}
