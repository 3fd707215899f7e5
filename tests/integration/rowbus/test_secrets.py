"""Passwords from each place the configuration may name (inline, ``ROWBUS_*``, a file, a
variable), against the embedded source and sink; and the password text absent from everything
rowbus prints or writes: `config show`, logs, errors, `status --json`, the apply job's config."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rowbus.cli import main
from rowbus.clients import mysql
from rowbus.clients.errors import SecretUnavailableError
from rowbus.config import Settings, load_settings
from rowbus.jobs import job_config
from rowbus.spark_apply.settings import SECRETS_ENV, JobConfig
from tests.conftest import connect

ENV = "ROWBUS_TEST_SECRET_PASSWORD"


@pytest.fixture
def account(services: Settings) -> Iterator[tuple[str, str]]:
    """(user, password): a user on the first source and on the sink with a password of its own,
    distinctive enough that finding it anywhere means it was printed."""
    user = f"sec{uuid.uuid4().hex[:8]}"
    password = f"Pw-{uuid.uuid4().hex}"
    servers = [services.sources[0], services.resolved_sink]
    for server in servers:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'")
    yield user, password
    for server in servers:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def config_file(services: Settings, tmp_path: Path, user: str, password: dict[str, str]) -> Path:
    """A configuration for the test stack whose source and sink log in as `user`, with
    `password` (one of the password keys) on both."""
    source = services.sources[0]
    sink = services.resolved_sink
    data = {
        "local": services.local.model_dump(mode="json"),
        "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
        "zookeeper": {"hosts": services.zookeeper.hosts},
        "sources": [
            {"name": "s1", "host": source.host, "port": source.port, "user": user, **password}
        ],
        "sink": {"host": sink.host, "port": sink.port, "user": user, **password},
        "apply": {"state_database": f"rowbus_secrets_{uuid.uuid4().hex[:6]}"},
    }
    path = tmp_path / "rowbus.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


@pytest.fixture
def each_form(
    account: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], dict[str, str]]:
    """`each_form(form)`: the password keys of `form`, with its file or variable prepared."""
    _user, password = account

    def form(name: str) -> dict[str, str]:
        if name == "inline":
            return {"password": password}
        if name == "rowbus_env":
            monkeypatch.setenv("ROWBUS_SINK__PASSWORD", password)
            return {}
        if name == "password_file":
            secret = tmp_path / "password"
            secret.write_text(password + "\n")
            return {"password_file": str(secret)}
        monkeypatch.setenv(ENV, password)
        return {"password_env": ENV}

    return form


@pytest.mark.parametrize("form", ["inline", "password_file", "password_env"])
def test_each_place_of_a_password_logs_in(
    services: Settings,
    account: tuple[str, str],
    each_form: Callable[[str], dict[str, str]],
    tmp_path: Path,
    form: str,
) -> None:
    user, _password = account
    settings = load_settings(config_file(services, tmp_path, user, each_form(form)))
    for server in (settings.sources[0], settings.resolved_sink):
        with mysql.connect(server) as conn, conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone() == (f"{user}@%",)


def test_a_rowbus_environment_override_logs_in_to_the_sink(
    services: Settings,
    account: tuple[str, str],
    each_form: Callable[[str], dict[str, str]],
    tmp_path: Path,
) -> None:
    user, _password = account
    settings = load_settings(config_file(services, tmp_path, user, each_form("rowbus_env")))
    with mysql.connect(settings.resolved_sink) as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == (f"{user}@%",)


@pytest.mark.parametrize("form", ["inline", "rowbus_env", "password_file", "password_env"])
def test_the_password_is_never_printed(
    services: Settings,
    account: tuple[str, str],
    each_form: Callable[[str], dict[str, str]],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    form: str,
) -> None:
    user, password = account
    path = config_file(services, tmp_path, user, each_form(form))
    caplog.set_level(logging.DEBUG)
    outputs: dict[str, str] = {}
    for name, argv in {
        "config show": ["config", "show"],
        "config show --yaml": ["config", "show", "--yaml"],
        "status --json": ["status", "--json"],
        "doctor": ["doctor", "--mysql-only"],
    }.items():
        main(["-c", str(path), "-vv", *argv])
        captured = capfd.readouterr()
        outputs[name] = captured.out + captured.err
    assert "PASS  TLS: not encrypted; loopback only" in outputs["doctor"]
    assert '"unavailable"' in outputs["status --json"]
    outputs["logs"] = caplog.text
    main(["-c", str(path), "apply", "--print-config"])
    outputs["apply --print-config"] = capfd.readouterr().out
    # The job's config as `rowbus apply` writes it to disk for Spark: a file or variable is
    # kept by name; an inline password travels in the job's environment, which the job reads
    # (and takes out of it) when it loads the file.
    job, env = job_config(load_settings(path)).at_rest()
    outputs["job config"] = job
    loaded = JobConfig.load(job, "job.json", {**env})
    assert loaded.sink.secret() == password
    assert (SECRETS_ENV in env) == (form in ("inline", "rowbus_env"))
    leaked = [name for name, text in outputs.items() if password in text]
    assert not leaked, f"the password is printed by {leaked}"


def test_a_wrong_password_from_a_file_is_not_in_the_error(
    services: Settings,
    account: tuple[str, str],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    user, password = account
    wrong = tmp_path / "wrong"
    wrong.write_text(password + "-not-it")
    path = config_file(services, tmp_path, user, {"password_file": str(wrong)})
    assert main(["-c", str(path), "doctor", "--mysql-only"]) == 1
    out = capfd.readouterr().out
    assert "Access denied" in out and password not in out


def test_a_missing_password_file_or_variable_is_one_line_naming_the_setting(
    services: Settings, account: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user, _password = account
    missing = tmp_path / "nowhere"
    settings = load_settings(config_file(services, tmp_path, user, {"password_file": str(missing)}))
    with pytest.raises(SecretUnavailableError) as failure:
        mysql.connect(settings.resolved_sink)
    assert f"password_file {missing}: cannot read it (No such file or directory)" in str(
        failure.value
    )
    monkeypatch.delenv(ENV, raising=False)
    settings = load_settings(config_file(services, tmp_path, user, {"password_env": ENV}))
    with pytest.raises(SecretUnavailableError) as unset:
        mysql.connect(settings.sources[0])
    assert f"password_env names {ENV}, which is not set" in str(unset.value)
    assert "\n" not in str(failure.value) + str(unset.value)
