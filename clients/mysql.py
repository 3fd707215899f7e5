"""The one seam around pymysql: every connection is opened by `connect`, and MySQL error codes
are classified once, by `classify`.

Kinds of failure (`Kind`), each with what a caller does about it:

- ``unavailable`` (2003, 2006, 2013, 2055 and other client-side codes): the server went away or
  cannot be reached — retryable;
- ``rolled_back`` (1205 lock wait timeout, 1213 deadlock): InnoDB rolled the transaction back —
  run the whole transaction again;
- ``denied`` (1044, 1045, 1142, 1227): the login or a grant is refused — an operator must act
  (1045 is the login itself: the user or the password is wrong, `wrong_login` says so; the
  others are a missing grant);
- ``full`` (1114 the table is full, 1021 the disk is full, and any error carrying the
  operating system's errno 28 "No space left on device"): the server has no room for the
  write — an operator must free space or raise the cap, retrying cannot help until then;
- ``tls`` (2026): TLS could not be agreed (``tls.mode: required`` and a server without TLS, a
  certificate that does not verify) — an operator must act, retrying cannot help;
- ``other``: the statement itself is wrong for this server — not retryable.
"""

from __future__ import annotations

import contextlib
import functools
import re
import ssl
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rowbus.clients.errors import MySQLClientError
from rowbus.clients.settings import TlsSettings
from rowbus.protocol.ddl import quote as quote  # noqa: PLC0414 - the one quote(), re-exported

if TYPE_CHECKING:
    from pymysql.connections import Connection

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
"""The server's own schemas: never replicated, never compared."""

UNAVAILABLE = frozenset({2003, 2006, 2013, 2055})
ROLLED_BACK = frozenset({1205, 1213})
CR_AUTH_PLUGIN_ERR = 2061
DENIED = frozenset({1044, 1045, 1142, 1227, CR_AUTH_PLUGIN_ERR})
ER_ACCESS_DENIED = 1045
"""The server refused the login itself; 1044, 1142 and 1227 refuse a privilege instead."""
CR_SSL_CONNECTION_ERROR = 2026
TLS = frozenset({CR_SSL_CONNECTION_ERROR})
FULL = frozenset({1021, 1114})
"""ER_DISK_FULL, ER_RECORD_FILE_FULL (InnoDB's answer to a data file that cannot grow: a full
disk, or a tablespace at the ``max`` of ``innodb_data_file_path``)."""
_NO_SPACE = re.compile(r"\b(?:errno|Errcode|error):? 28\b|No space left on device", re.IGNORECASE)
"""How the server reports the operating system's ENOSPC inside another error (1030 "Got error
28 from storage engine", 3 and 1026 "Error writing file … (Errcode: 28 …)")."""
SHA2_FULL_AUTH = (
    "the server asks for caching_sha2_password's full authentication (the password is not in "
    "its cache), which over a connection without TLS needs the 'cryptography' package: "
    "install it (pip install cryptography), or log in once over TLS so the server caches the "
    "password, or use mysql_native_password for this user"
)


class Kind(StrEnum):
    UNAVAILABLE = "unavailable"
    ROLLED_BACK = "rolled_back"
    DENIED = "denied"
    TLS = "tls"
    FULL = "full"
    OTHER = "other"


class Endpoint(Protocol):
    """Anything with a server address, an account and TLS settings (`MySQLConnection`, a
    source, the sink)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def tls(self) -> TlsSettings: ...
    def secret(self) -> str: ...


def _secret(value: Any) -> str:
    reveal = getattr(value, "get_secret_value", None)
    return str(reveal()) if callable(reveal) else str(value or "")


def error_code(exc: BaseException) -> int | None:
    """The MySQL error code a pymysql error carries (None for other exceptions)."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def classify(exc: BaseException) -> Kind:
    """What kind of failure a pymysql error is."""
    import pymysql

    code = error_code(exc)
    if code in ROLLED_BACK:
        return Kind.ROLLED_BACK
    if code in DENIED:
        return Kind.DENIED
    if code in TLS:
        return Kind.TLS
    if code in FULL or (code is not None and code < 2000 and _NO_SPACE.search(str(exc))):
        return Kind.FULL
    if code in UNAVAILABLE or (code is not None and 2000 <= code < 3000):
        return Kind.UNAVAILABLE
    if isinstance(exc, pymysql.err.InterfaceError | ConnectionError | TimeoutError):
        return Kind.UNAVAILABLE
    return Kind.OTHER


def wrong_login(exc: BaseException, whose: str) -> str | None:
    """What to change when the server refused the login itself (1045: the user or the password
    is wrong, which no grant would fix), naming whose settings (``the sink``, ``source
    source1``); None for any other failure (a missing grant is the caller's to name)."""
    if error_code(exc) != ER_ACCESS_DENIED:
        return None
    return (
        f"the user or the password is wrong: check user and password (or password_file, "
        f"password_env) of {whose}"
    )


def translate(exc: BaseException, what: str) -> MySQLClientError:
    """The `MySQLClientError` for a pymysql failure while doing `what`."""
    kind = classify(exc)
    code = error_code(exc)
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    text = str(args[1]) if len(args) > 1 else str(exc)
    label = f"{code}: {text}" if code is not None else f"{type(exc).__name__}: {text}"
    retryable = kind in (Kind.UNAVAILABLE, Kind.ROLLED_BACK)
    return MySQLClientError(f"{what}: {label}", code, kind.value, retryable=retryable)


@contextlib.contextmanager
def mysql_errors(what: str) -> Iterator[None]:
    """Translate a pymysql error raised inside the block into `MySQLClientError`."""
    import pymysql

    try:
        yield
    except (pymysql.MySQLError, ConnectionError) as exc:
        raise translate(exc, what) from exc


def connect(
    endpoint: Endpoint | None = None,
    *,
    database: str | None = None,
    autocommit: bool = True,
    connect_timeout: float = 10,
    read_timeout: float | None = None,
    **kwargs: Any,
) -> Connection[Any]:
    """A pymysql connection (utf8mb4) to `endpoint` (its TLS settings and password applied), or
    to the explicit ``host``/``port``/``user``/``password`` in `kwargs` (a local socket, a
    benchmark: pymysql's own TLS default). Failures raise pymysql's own errors: callers wrap the
    call in `mysql_errors` (or their component's translation) to say what they were doing. A
    password file or variable that cannot be read raises `SecretUnavailableError`."""
    import pymysql

    params: dict[str, Any] = {"charset": "utf8mb4"}
    tls: TlsSettings | None = None
    if endpoint is not None:
        tls = endpoint.tls
        params.update(
            host=endpoint.host,
            port=endpoint.port,
            user=endpoint.user,
            password=endpoint.secret(),
            **_tls_options(tls, f"{endpoint.host}:{endpoint.port}"),
        )
    if "password" in kwargs:
        kwargs["password"] = _secret(kwargs["password"])
    if "db" in kwargs:  # mysql-replication still uses pymysql's old name
        database = database or kwargs.pop("db")
    params.update(kwargs)
    where = f"{params.get('host', 'localhost')}:{params.get('port', 3306)}"
    try:
        return _connection_class()(  # type: ignore[no-any-return]
            tls=tls,
            database=database,
            autocommit=autocommit,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            **params,
        )
    except pymysql.err.OperationalError as exc:
        cause = getattr(exc, "original_exception", None)
        if isinstance(cause, ssl.SSLError):
            raise _tls_failure(cause, where, tls) from exc
        raise
    except RuntimeError as exc:
        # pymysql raises a bare RuntimeError (not a MySQLError) when the RSA exchange of
        # caching_sha2_password needs a package it lacks: one clear, non-retryable line.
        if "cryptography" not in str(exc):
            raise
        user = params.get("user", "")
        raise pymysql.err.OperationalError(
            CR_AUTH_PLUGIN_ERR, f"user {user}: {SHA2_FULL_AUTH}"
        ) from exc


def _tls_options(tls: TlsSettings, where: str) -> dict[str, Any]:
    """`tls` as pymysql's options: ``ssl_disabled``, or an `ssl.SSLContext` (built here, so
    verification is exactly what the settings say, whatever pymysql's defaults are)."""
    if tls.mode == "off":
        return {"ssl_disabled": True}
    if tls.ca is not None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = tls.checks_hostname
        _load(where, "tls.ca", tls.ca, lambda: ctx.load_verify_locations(cafile=str(tls.ca)))
    else:
        # No CA: encryption without authentication of the server, as MySQL clients do in their
        # PREFERRED and REQUIRED modes.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = tls.cert, tls.key
    if cert is not None:
        _load(
            where,
            "tls.cert / tls.key",
            cert,
            lambda: ctx.load_cert_chain(str(cert), str(key) if key else None),
        )
    return {"ssl": ctx}


def _load(where: str, setting: str, path: Path, load: Callable[[], None]) -> None:
    import pymysql

    try:
        load()
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise pymysql.err.OperationalError(
            CR_SSL_CONNECTION_ERROR, f"TLS to {where}: cannot load {setting} {path} ({reason})"
        ) from exc


def _tls_failure(exc: ssl.SSLError, where: str, tls: TlsSettings | None) -> Exception:
    """One line for a TLS handshake that failed, naming the setting to look at."""
    import pymysql

    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or exc.reason or str(exc)
        ca = tls.ca if tls is not None else None
        hint = (
            f"the server's certificate does not verify against tls.ca {ca} for host "
            f"{where.rpartition(':')[0]}: check tls.ca, and that the certificate names that host "
            "(or set tls.verify_hostname: false)"
        )
        return pymysql.err.OperationalError(
            CR_SSL_CONNECTION_ERROR, f"TLS to {where}: certificate verify failed ({reason}); {hint}"
        )
    reason = exc.reason or str(exc)
    return pymysql.err.OperationalError(
        CR_SSL_CONNECTION_ERROR,
        f"TLS to {where}: handshake failed ({reason}); check the tls settings of this server "
        "(tls.cert and tls.key when the server requires a client certificate)",
    )


@functools.cache
def _connection_class() -> type[Any]:
    """pymysql's connection class with `tls.mode` enforced (built on first use: this module
    imports pymysql lazily, as every function here does)."""
    import pymysql
    from pymysql.constants import CLIENT

    class TlsConnection(pymysql.connections.Connection):
        """pymysql's connection with `tls.mode` enforced before any credential is sent.

        pymysql treats an `ssl` option as "required" in some versions and silently falls back
        to plain text in others; deciding here makes both modes the same on every version."""

        server_capabilities: int  # set by pymysql from the server's greeting; not in its stubs

        def __init__(self, *args: Any, tls: TlsSettings | None, **kwargs: Any) -> None:
            self._rowbus_tls = tls
            super().__init__(*args, **kwargs)

        def _request_authentication(self) -> None:
            tls = self._rowbus_tls
            if tls is not None and tls.mode != "off":
                offered = bool(self.server_capabilities & CLIENT.SSL)
                if not offered and tls.required:
                    why = "tls.mode is required" if tls.mode == "required" else "tls.ca is set"
                    raise pymysql.err.OperationalError(
                        CR_SSL_CONNECTION_ERROR,
                        f"{why} but the server {self.host}:{self.port} does not offer TLS: "
                        "enable TLS on the server (ssl_cert, ssl_key), or set tls.mode: "
                        "preferred to accept a plain connection",
                    )
                if not offered:  # preferred: go on in plain text, as MySQL clients do
                    self.ssl = False
                    self.client_flag &= ~CLIENT.SSL
            super()._request_authentication()  # type: ignore[misc]  # private, not in stubs

    return TlsConnection


ER_PARSE_ERROR = 1064
BINLOG_STATUS = ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS")
"""How a server names its current binlog position: MariaDB and MySQL up to 8.3 answer the
first; MySQL 8.4 removed it (a syntax error) for the second, which 8.2+ already knows."""


def binlog_position(cursor: Any) -> tuple[str, int] | None:
    """The server's current binlog file and position (None: binary logging is off). Falls back
    to ``SHOW BINARY LOG STATUS`` only when ``SHOW MASTER STATUS`` is a syntax error there;
    every other error (a missing grant, a lost connection) is raised."""
    for sql in BINLOG_STATUS:
        try:
            cursor.execute(sql)
        except Exception as exc:
            if error_code(exc) == ER_PARSE_ERROR and sql != BINLOG_STATUS[-1]:
                continue
            raise
        row = cursor.fetchone()
        return (str(row[0]), int(row[1])) if row else None
    return None  # pragma: no cover - the loop returns or raises
