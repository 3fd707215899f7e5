from __future__ import annotations

import json
from pathlib import Path

import pytest

from rowbus.cli import main
from rowbus.config import load_settings
from rowbus.exceptions import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "rowbus.yaml"
    path.write_text(text)
    return path


def test_defaults_point_every_client_at_the_local_stack(monkeypatch):
    monkeypatch.delenv("ROWBUS_CONFIG", raising=False)
    monkeypatch.chdir("/")
    settings = load_settings()
    assert settings.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert settings.zookeeper.hosts == "127.0.0.1:12181"
    assert [(s.name, s.port) for s in settings.sources] == [("source1", 13306), ("source2", 13307)]
    assert settings.resolved_sink.port == 13308


def test_a_local_port_moves_the_service_and_its_clients(tmp_path):
    settings = load_settings(
        write(tmp_path, "local:\n  ports:\n    kafka: 20000\n    source2: 20001\n")
    )
    assert settings.kafka.bootstrap_servers == "127.0.0.1:20000"
    assert settings.source("source2").port == 20001


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ROWBUS_KAFKA__BOOTSTRAP_SERVERS", "broker:9092")
    settings = load_settings(write(tmp_path, "kafka:\n  bootstrap_servers: file:9092\n"))
    assert settings.kafka.bootstrap_servers == "broker:9092"


def test_unknown_key_is_one_line_naming_key_file_and_allowed(tmp_path):
    path = write(tmp_path, "kafka:\n  bootstrap_server: x\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    assert "unknown key 'kafka.bootstrap_server'" in message
    assert "allowed under kafka: bootstrap_servers, client" in message


def test_wrong_type_names_the_key_and_the_value(tmp_path):
    path = write(tmp_path, "local:\n  ports:\n    sink: lots\n")
    with pytest.raises(ConfigError, match=r"local\.ports\.sink: .*integer.*'lots'"):
        load_settings(path)


def test_unknown_key_inside_a_list_item(tmp_path):
    path = write(tmp_path, "sources:\n  - name: a\n    pasword: x\n")
    with pytest.raises(
        ConfigError, match=r"'sources\.0\.pasword'.*allowed under sources\.0: .*password"
    ):
        load_settings(path)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "kafka:\n  client: {a: 1\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_settings(path)


def test_duplicate_source_names_are_refused(tmp_path):
    path = write(tmp_path, "sources:\n  - {name: a, port: 1}\n  - {name: a, port: 2}\n")
    with pytest.raises(ConfigError, match="source names must be unique"):
        load_settings(path)


def test_secrets_are_masked_in_the_shown_configuration(tmp_path, capsys):
    path = write(tmp_path, "sources:\n  - {name: a, password: hunter2}\n")
    assert main(["-c", str(path), "config", "show"]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert "'**********'" in out or "**********" in out
    assert "hunter2" not in repr(load_settings(path))


def test_cli_refuses_a_bad_file_with_one_line_and_exit_2(tmp_path, capsys):
    path = write(tmp_path, "zookeeper:\n  hostz: x\n")
    assert main(["-c", str(path), "local", "status"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("rowbus: error: ") and "zookeeper.hostz" in err


def test_a_partly_set_sink_stays_the_embedded_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROWBUS_SINK__PASSWORD", "x")
    settings = load_settings(None)
    assert settings.resolved_sink.port == settings.local.ports.sink
    assert settings.resolved_sink.port != settings.sources[0].port
    assert settings.resolved_sink.password.get_secret_value() == "x"


def test_a_sink_with_its_own_host_keeps_the_mysql_default_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROWBUS_SINK__HOST", "warehouse")
    assert load_settings(None).resolved_sink.address == "warehouse:3306"


def test_an_unexpected_failure_ends_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rowbus import cli

    def boom(*_: object) -> int:
        raise ValueError("something odd")

    parser = cli.build_parser()
    args = parser.parse_args(["config", "show"])
    monkeypatch.setattr(args, "func", boom)
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(args))
    assert cli.main(["config", "show"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rowbus: error: config: ValueError: something odd (run with -v for the trace)"]


def test_a_closed_stdout_is_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from rowbus import cli

    def closed(*_: object) -> int:
        raise BrokenPipeError

    args = cli.build_parser().parse_args(["config", "show"])
    monkeypatch.setattr(args, "func", closed)
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(args))
    monkeypatch.setattr(cli.os, "dup2", lambda *_: None)
    assert cli.main(["config", "show"]) == 141


class _Fixed:
    def __init__(self, args: object) -> None:
        self.args = args

    def parse_args(self, _argv: object) -> object:
        return self.args


def test_config_show_names_where_each_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rowbus.yaml"
    path.write_text("reader:\n  start: earliest\nsink:\n  host: warehouse\n")
    monkeypatch.setenv("ROWBUS_SINK__PASSWORD", "s3cret")
    assert main(["-c", str(path), "config", "show"]) == 0
    lines = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["reader.start"].endswith(f"# file {path}")
    assert lines["sink.host"].endswith(f"# file {path}")
    assert lines["sink.password"].endswith("# env ROWBUS_SINK__PASSWORD")
    assert "s3cret" not in lines["sink.password"]
    assert lines["kafka.bootstrap_servers"].endswith("# embedded stack (local.ports)")
    assert lines["apply.job"].endswith("# default")


def test_long_running_commands_offer_the_same_metrics_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`reader run`, `reader node`, `tail` and `apply` take ``--metrics-port`` alike (apply and
    node had none: their metrics could only be set in the file, or not at all); apply hands it
    to the job's configuration."""
    from rowbus.cli import build_parser, main

    parser = build_parser()
    for argv in (
        ["reader", "run", "--source", "s", "--metrics-port", "9"],
        ["reader", "node", "--metrics-port", "9"],
        ["tail", "t", "--metrics-port", "9"],
        ["apply", "--metrics-port", "9"],
    ):
        assert parser.parse_args(argv).metrics_port == 9, argv
    assert main(["apply", "--metrics-port", "0", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["apply"]["metrics_port"] == 0
