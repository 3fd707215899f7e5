"""The strict settings base every component's settings derive from, the one MySQL
connection type (sources, the sink, the state database all use it) and ZooKeeper's digest
credentials (`ZooKeeperAuth`, rendered by `rowbus.clients.zookeeper.start_client`).

A connection's TLS (`TlsSettings`) and where its password comes from (inline, a file, an
environment variable) are declared here and rendered into pymysql's options only by
`rowbus.clients.mysql.connect`, the one place a connection is opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from rowbus.clients.errors import SecretUnavailableError


class StrictModel(BaseModel):
    """Unknown keys are refused and values are frozen, so a typo is an error, never ignored."""

    # Attribute docstrings become each setting's description: the configuration reference
    # (docs/configuration.md) is generated from them, so a setting cannot go undocumented.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class TlsSettings(StrictModel):
    """TLS of one MySQL connection (``tls:`` under a source or the sink).

    ``preferred`` (the default, as MySQL's own clients do): TLS when the server offers it, plain
    otherwise; it resists an eavesdropper but not a man in the middle, who can strip the offer.
    ``required``: no connection without TLS. ``off``: never TLS. Without `ca` the server's
    certificate is not checked (encryption only); with it, the certificate must chain to `ca`
    and, unless `verify_hostname` is false, name the host connected to. A `ca` with `mode` left
    unset makes TLS required, as ``--ssl-ca`` does to MySQL's clients: a CA asks for a verified
    server, which a plain connection cannot be.
    """

    mode: Literal["required", "preferred", "off"] = "preferred"
    """``preferred``: TLS when the server offers it (not proof against a man in the middle);
    ``required``: no connection without TLS; ``off``: never TLS."""
    ca: Path | None = None
    """PEM file of the CA(s) the server's certificate must chain to."""
    cert: Path | None = None
    """PEM client certificate, for users created ``REQUIRE X509`` / ``REQUIRE SUBJECT``."""
    key: Path | None = None
    """PEM private key of `cert` (unset: `cert` holds it too)."""
    verify_hostname: bool | None = None
    """Check that the certificate names the host; unset: true when `ca` is given."""

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 (PyYAML) reads a bare `off` as false: `mode: off` must still mean off.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _consistent(self) -> TlsSettings:
        if self.mode == "off" and (self.ca or self.cert or self.key):
            raise ValueError("tls.mode is off, so tls.ca, tls.cert and tls.key must be unset")
        if self.key is not None and self.cert is None:
            raise ValueError("tls.key is set without tls.cert (the certificate it belongs to)")
        if self.verify_hostname and self.ca is None:
            raise ValueError("tls.verify_hostname needs tls.ca (the CA to verify against)")
        return self

    @property
    def required(self) -> bool:
        """Whether a server without TLS is refused (see the class docstring)."""
        return self.mode == "required" or (
            self.ca is not None and "mode" not in self.model_fields_set
        )

    @property
    def checks_hostname(self) -> bool:
        return self.ca is not None and self.verify_hostname is not False


class _PasswordFields(Protocol):
    @property
    def password(self) -> SecretStr | None: ...
    @property
    def password_file(self) -> Path | None: ...
    @property
    def password_env(self) -> str | None: ...


def read_password(fields: _PasswordFields, whose: str) -> str:
    """The password `fields` point at, read now: the variable `password_env` names, else the
    file `password_file` (its trailing newline dropped), else `password` inline. `whose` says in
    the error whose password it is; the value itself is never part of a message."""
    if fields.password_env is not None:
        value = os.environ.get(fields.password_env)
        if value is None:
            raise SecretUnavailableError(
                f"password_env names {fields.password_env}, which is not set in the "
                f"environment of this process ({whose})"
            )
        return value
    if fields.password_file is not None:
        try:
            text = fields.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise SecretUnavailableError(
                f"password_file {fields.password_file}: cannot read it ({exc.strerror}); "
                f"it holds {whose}"
            ) from exc
        return text.rstrip("\r\n")
    if fields.password is None:
        raise SecretUnavailableError(f"no password, password_file or password_env is set ({whose})")
    return fields.password.get_secret_value()


@dataclass(frozen=True)
class _Secret:
    """One value's source, for `read_password`."""

    password: SecretStr | None = None
    password_file: Path | None = None
    password_env: str | None = None


def read_referenced(
    from_file: Mapping[str, Path], from_env: Mapping[str, str], setting: str
) -> dict[str, str]:
    """The values of settings given by reference (``kafka.client_from_file`` and
    ``client_from_env``: key → file, key → variable), read now; `setting` names them in an
    error (``kafka.client``)."""
    read: dict[str, str] = {}
    for key, path in from_file.items():
        read[key] = read_password(_Secret(password_file=path), f"{setting}_from_file.{key}")
    for key, name in from_env.items():
        read[key] = read_password(_Secret(password_env=name), f"{setting}_from_env.{key}")
    return read


def _only_one_password(fields: BaseModel) -> None:
    given = [
        name
        for name in ("password", "password_file", "password_env")
        if name in fields.model_fields_set and getattr(fields, name) is not None
    ]
    if len(given) > 1:
        raise ValueError(f"set only one of {', '.join(given)} (each is a password)")


class MySQLConnection(StrictModel):
    """Where a MySQL/MariaDB server answers, and as whom.

    The password is one of `password` (inline, or ``ROWBUS_…__PASSWORD``), `password_file` or
    `password_env`; the last two are read each time a connection opens (`secret`), so a
    rotated password is picked up and the value is never part of the settings themselves.
    """

    host: str = "127.0.0.1"
    """Host name or address of the server."""
    port: int = Field(3306, ge=1, le=65535)
    """TCP port of the server."""
    user: str = "rowbus"
    """The account to log in as."""
    password: SecretStr = SecretStr("rowbus")
    """Its password (never printed; prefer `password_file` or `password_env`)."""
    password_file: Path | None = None
    """A file holding the password (a trailing newline is not part of it)."""
    password_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The name of an environment variable holding the password."""
    tls: TlsSettings = TlsSettings()

    @model_validator(mode="after")
    def _one_password(self) -> MySQLConnection:
        _only_one_password(self)
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def plain(self) -> dict[str, Any]:
        """These settings as JSON data for a child process's configuration file: an inline
        password revealed (the child has no other way to learn it); a ``password_file`` or
        ``password_env`` kept by name, and read by the child itself."""
        data = self.model_dump(mode="json")
        if self.password_file is None and self.password_env is None:
            data["password"] = self.password.get_secret_value()
        else:
            del data["password"]
        return data

    def secret(self) -> str:
        """The password, read now from where the settings say it is."""
        return read_password(self, f"the password of {self.user}@{self.address}")


class ServerAddress(StrictModel):
    """Another server of a source, reached with the source's user, password and TLS."""

    host: str = "127.0.0.1"
    """Host name or address of the replica."""
    port: int = Field(3306, ge=1, le=65535)
    """TCP port of the replica."""


class SourceConnection(MySQLConnection):
    """One upstream server a reader tails; `name` keys its topics, checkpoints and election."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """The source's name (``A-Z a-z 0-9 _ . -``): it names its data topic, checkpoints,
    leader election and the `source` of every event it publishes."""
    include_schemas: tuple[str, ...] = ()
    """Schema patterns of this source (replaces ``reader.include_schemas``): several sources
    may share one server, each reading its own schemas."""
    replicas: tuple[ServerAddress, ...] = ()
    """Servers holding the same transactions under the same GTIDs (replicas with
    log_slave_updates / log_replica_updates): when the reader loses the server it reads, it
    continues on the first of these (then the others) that answers, by GTID (PROTOCOL.md
    §9.4)."""

    def servers(self) -> list[SourceConnection]:
        """This server, then each replica, as connections of their own."""
        return [
            self.model_copy(update={"replicas": ()}),
            *(
                self.model_copy(update={"host": r.host, "port": r.port, "replicas": ()})
                for r in self.replicas
            ),
        ]


class ZooKeeperAuth(StrictModel):
    """Digest credentials for ZooKeeper (``zookeeper.auth``).

    When set, every client rowbus opens authenticates with them, and every node it creates
    carries an ACL that admits only them (ZooKeeper's ``digest`` scheme, all permissions): a
    client without them can neither read nor change rowbus's elections, memberships and
    checkpoints. Nodes that existed before keep the ACL they were created with. The password is
    one of `password`, `password_file` or `password_env`, read when a session starts and never
    printed.
    """

    user: str = Field(pattern=r"^[^:]+$")
    """The digest user name (no ``:``)."""
    password: SecretStr | None = None
    """Its password (never printed; prefer `password_file` or `password_env`)."""
    password_file: Path | None = None
    """A file holding the password (a trailing newline is not part of it)."""
    password_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The name of an environment variable holding the password."""

    @model_validator(mode="after")
    def _one_password(self) -> ZooKeeperAuth:
        _only_one_password(self)
        if self.password is None and self.password_file is None and self.password_env is None:
            raise ValueError("zookeeper.auth needs one of password, password_file, password_env")
        return self

    def secret(self) -> str:
        """The password, read now from where the settings say it is."""
        return read_password(self, f"the ZooKeeper password of {self.user} (zookeeper.auth)")

    def plain(self) -> dict[str, Any]:
        """These settings as JSON data for a child process's configuration file (see
        `MySQLConnection.plain`)."""
        data = self.model_dump(mode="json")
        if self.password is not None:
            data["password"] = self.password.get_secret_value()
        else:
            del data["password"]
        return data
