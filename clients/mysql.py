"""The one seam around pymysql: every connection is opened by `connect`, and MySQL error codes
are classified once, by `classify`.

Kinds of failure (`Kind`), each with what a caller does about it:

- ``unavailable`` (2003, 2006, 2013, 2055 and other client-side codes): the server went away or
  cannot be reached — retryable;
- ``rolled_back`` (1205 lock wait timeout, 1213 deadlock): InnoDB rolled the transaction back —
  run the whole transaction again;
- ``denied`` (1044, 1045, 1142, 1227): a grant is missing — an operator must act;
- ``other``: the statement itself is wrong for this server — not retryable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from rowbus.clients.errors import MySQLClientError
from rowbus.protocol.ddl import quote as quote  # noqa: PLC0414 - the one quote(), re-exported

if TYPE_CHECKING:
    from pymysql.connections import Connection

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
"""The server's own schemas: never replicated, never compared."""

UNAVAILABLE = frozenset({2003, 2006, 2013, 2055})
ROLLED_BACK = frozenset({1205, 1213})
CR_AUTH_PLUGIN_ERR = 2061
DENIED = frozenset({1044, 1045, 1142, 1227, CR_AUTH_PLUGIN_ERR})
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
    OTHER = "other"


class Endpoint(Protocol):
    """Anything with a server address and an account (`MySQLConnection`, a source, the sink)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def password(self) -> Any: ...


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
    if code in UNAVAILABLE or (code is not None and 2000 <= code < 3000):
        return Kind.UNAVAILABLE
    if isinstance(exc, pymysql.err.InterfaceError | ConnectionError | TimeoutError):
        return Kind.UNAVAILABLE
    return Kind.OTHER


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
    """A pymysql connection (utf8mb4) to `endpoint`, or to the explicit ``host``/``port``/
    ``user``/``password`` in `kwargs`. Failures raise pymysql's own errors: callers wrap the
    call in `mysql_errors` (or their component's translation) to say what they were doing."""
    import pymysql

    params: dict[str, Any] = {"charset": "utf8mb4"}
    if endpoint is not None:
        params.update(
            host=endpoint.host,
            port=endpoint.port,
            user=endpoint.user,
            password=_secret(endpoint.password),
        )
    if "password" in kwargs:
        kwargs["password"] = _secret(kwargs["password"])
    if "db" in kwargs:  # mysql-replication still uses pymysql's old name
        database = database or kwargs.pop("db")
    params.update(kwargs)
    try:
        return pymysql.connect(
            database=database,
            autocommit=autocommit,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            **params,
        )
    except RuntimeError as exc:
        # pymysql raises a bare RuntimeError (not a MySQLError) when the RSA exchange of
        # caching_sha2_password needs a package it lacks: one clear, non-retryable line.
        if "cryptography" not in str(exc):
            raise
        user = params.get("user", "")
        raise pymysql.err.OperationalError(
            CR_AUTH_PLUGIN_ERR, f"user {user}: {SHA2_FULL_AUTH}"
        ) from exc


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
