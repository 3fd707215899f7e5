"""Kafka's TLS and SASL settings: handed to every client (reader, Subscriber, the apply job and
what it hands Spark), read from a file or a variable when asked, and never shown — `config
show`, the apply job's Spark options (where Spark's own redaction must catch them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rowbus.cli import main
from rowbus.clients.errors import SecretUnavailableError
from rowbus.clients.kafka import MASK, is_secret, redacted
from rowbus.commands.reader import _services
from rowbus.config import load_settings
from rowbus.exceptions import ConfigError
from rowbus.jobs import job_config
from rowbus.spark_apply.source import kafka_options, kafka_settings

SPARK_REDACTION = re.compile(r"(?i)secret|password|token|access[.]?key")
"""Spark 4's default ``spark.redaction.regex`` (core's `package.scala`, SECRET_REDACTION_PATTERN),
which Spark applies to option and configuration names before it shows their values."""

SECURE = (
    "kafka:\n"
    "  client:\n"
    "    security.protocol: SASL_SSL\n"
    "    sasl.mechanism: PLAIN\n"
    "    sasl.username: rowbus\n"
    "    sasl.password: hunter2\n"
    "    ssl.ca.location: /etc/rowbus/kafka-ca.pem\n"
    "reader:\n"
    "  kafka: {ssl.key.password: k3y-pass}\n"
)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rowbus.yaml"
    path.write_text(text)
    return path


def test_secret_settings_are_recognised() -> None:
    for key in ("sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
                "sasl.oauthbearer.client.secret", "sasl.jaas.config"):  # fmt: skip
        assert is_secret(key), key
    for key in ("security.protocol", "sasl.username", "sasl.mechanism", "ssl.ca.location",
                "ssl.certificate.location", "bootstrap.servers"):  # fmt: skip
        assert not is_secret(key), key
    assert redacted({"sasl.password": "x", "sasl.username": "u"}) == {
        "sasl.password": "**********",
        "sasl.username": "u",
    }


def test_config_show_masks_kafka_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, SECURE)
    for extra in ([], ["--yaml"]):
        assert main(["-c", str(path), "config", "show", *extra]) == 0
        out = capsys.readouterr().out
        assert "hunter2" not in out and "k3y-pass" not in out
        assert "SASL_SSL" in out and "/etc/rowbus/kafka-ca.pem" in out
    assert "hunter2" not in repr(load_settings(path))


def test_every_client_gets_the_security_settings(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, SECURE))
    expected = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "rowbus",
        "sasl.password": "hunter2",
        "ssl.ca.location": "/etc/rowbus/kafka-ca.pem",
    }
    # The reader, and (through the same rendering) `rowbus tail`'s Subscriber, `snapshot`,
    # `ddl-locks`, `status`, `doctor`.
    assert expected.items() <= _services(settings).kafka.items()
    assert expected.items() <= settings.kafka.client_config().items()
    job = job_config(settings)
    assert expected.items() <= job.kafka.items()
    assert "hunter2" not in repr(job)


def test_the_job_hands_spark_its_kafka_secrets_only_under_names_spark_redacts() -> None:
    config = {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.username": "rowbus",
        "sasl.password": "hunter2",
        "ssl.key.password": "k3y-pass",
        "ssl.key.pem": "-----BEGIN PRIVATE KEY-----pem-body",
    }
    options = kafka_options(config)
    for name, value in options.items():
        if any(secret in value for secret in ("hunter2", "k3y-pass", "pem-body")):
            assert SPARK_REDACTION.search(name), f"option {name} shows a secret"
    assert "hunter2" not in options["kafka"] and "pem-body" not in options["kafka"]
    assert "rowbus" in options["kafka"]
    # Spark hands the source its options with lower-cased names.
    assert kafka_settings({k.lower(): v for k, v in options.items()}) == config


def test_secrets_from_a_file_or_a_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text("from-file\n")
    path = _write(
        tmp_path,
        "kafka:\n"
        f"  client_from_file: {{sasl.password: {secret}}}\n"
        "  client_from_env: {ssl.key.password: RB_KAFKA_KEY}\n",
    )
    monkeypatch.setenv("RB_KAFKA_KEY", "from-env")
    settings = load_settings(path)
    config = settings.kafka.client_config()
    assert config["sasl.password"] == "from-file"
    assert config["ssl.key.password"] == "from-env"
    monkeypatch.delenv("RB_KAFKA_KEY")
    with pytest.raises(
        SecretUnavailableError, match=re.escape("kafka.client_from_env.ssl.key.password")
    ):
        settings.kafka.client_config()


def test_spark_s_own_kafka_format_with_security_settings_is_one_line(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, SECURE + "apply: {kafka_format: spark}\n"))
    with pytest.raises(ConfigError, match=re.escape("set apply.kafka_format: python")) as caught:
        job_config(settings)
    assert "\n" not in str(caught.value) and "hunter2" not in str(caught.value)
    assert "kafka.client sets sasl.mechanism, sasl.password" in str(caught.value)


AT_REST = SECURE + (
    "sink: {password: s1nk-pass}\n"
    "zookeeper: {auth: {user: rb, password: zk-pass}}\n"
    "sources: [{name: s1}]\n"
)
SECRETS = ("hunter2", "k3y-pass", "s1nk-pass", "zk-pass")


def test_print_config_masks_every_secret_and_a_job_started_from_it_says_where_to_give_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rowbus apply --print-config` masks as `config show` does; the masked file run as a job
    is refused in one line naming each masked setting (it held them in clear before)."""
    from rowbus.spark_apply.exceptions import ApplyError
    from rowbus.spark_apply.settings import JobConfig

    assert main(["-c", str(_write(tmp_path, AT_REST)), "apply", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert not [s for s in SECRETS if s in printed], printed
    data = json.loads(printed)
    assert data["kafka"]["sasl.password"] == data["sink"]["password"] == MASK
    assert data["kafka"]["sasl.username"] == "rowbus"
    with pytest.raises(ApplyError) as refused:
        JobConfig.load(printed, "job.json", {})
    assert str(refused.value).startswith(
        "job.json: sink.password, zookeeper_auth.password, kafka.sasl.password is masked"
    )
    assert "\n" not in str(refused.value)


def test_the_job_file_holds_no_secret_and_the_job_gets_them_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `rowbus apply` writes for the job: no secret in the file; the job reads them from
    the variable it is started with and takes it out of its environment (its JVM and Python
    workers do not inherit it); the job's configuration is the same as before."""
    from rowbus.spark_apply.settings import SECRETS_ENV, JobConfig

    job = job_config(load_settings(_write(tmp_path, AT_REST)))
    text, env = job.at_rest()
    assert not [s for s in SECRETS if s in text], text
    assert list(env) == [SECRETS_ENV]
    environ = {"PATH": "/bin", **env}
    loaded = JobConfig.load(text, "job.json", environ)
    assert environ == {"PATH": "/bin"}
    assert loaded == job
    assert loaded.sink.secret() == "s1nk-pass" and loaded.kafka["sasl.password"] == "hunter2"
    # A password the configuration names a file or a variable for stays a reference.
    secret = tmp_path / "sink-password"
    secret.write_text("from-file\n")
    by_file = AT_REST.replace("{password: s1nk-pass}", f"{{password_file: {secret}}}")
    text, env = job_config(load_settings(_write(tmp_path, by_file))).at_rest()
    assert json.loads(text)["sink"]["password_file"] == str(secret)
    assert "sink.password" not in json.loads(env[SECRETS_ENV])


def test_kafka_settings_from_a_file_or_a_variable_stay_references_read_where_the_job_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a file printed by --print-config runs as it is on a cluster that has them."""
    from rowbus.spark_apply.settings import SECRETS_ENV, JobConfig

    secret = tmp_path / "kafka-password"
    secret.write_text("from-file\n")
    path = _write(
        tmp_path,
        "kafka:\n"
        f"  client_from_file: {{sasl.password: {secret}}}\n"
        "  client_from_env: {ssl.key.password: RB_KAFKA_KEY}\n",
    )
    monkeypatch.setenv("RB_KAFKA_KEY", "from-env")
    job = job_config(load_settings(path))
    assert job.kafka["sasl.password"] == "from-file"
    for text in (job.shown(), job.at_rest()[0], job.dump()):
        assert "from-file" not in text and "from-env" not in text
        data = json.loads(text)
        assert data["kafka_from_file"] == {"sasl.password": str(secret)}
        assert data["kafka_from_env"] == {"ssl.key.password": "RB_KAFKA_KEY"}
    handed = json.loads(job.at_rest()[1][SECRETS_ENV])
    assert list(handed) == ["sink.password"]  # the inline default only
    text, env = job.at_rest()
    loaded = JobConfig.load(text, "job.json", dict(env))
    assert loaded.kafka["sasl.password"] == "from-file"
    assert loaded.kafka["ssl.key.password"] == "from-env"
