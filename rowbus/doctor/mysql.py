"""Check that a source server writes the binlog a reader needs and grants what it needs, and
that the connections to the sources and the sink are encrypted as configured."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

import pymysql

from rowbus.clients import mysql
from rowbus.clients.errors import SecretUnavailableError
from rowbus.config import MySQLSettings
from rowbus.doctor.report import Check
from rowbus.producer.eventtypes import REFUSED_SETTINGS


def _connect(
    settings: MySQLSettings, consequence: str
) -> tuple[pymysql.connections.Connection[pymysql.cursors.Cursor] | None, Check]:
    """A connection and the check saying so; (None, the failed check) when it fails."""
    try:
        conn = mysql.connect(settings, connect_timeout=5)
    except (pymysql.MySQLError, SecretUnavailableError) as exc:
        tls = mysql.classify(exc) is mysql.Kind.TLS
        fix = (
            "check the tls settings (mode, ca, cert, key, verify_hostname) of this server"
            if tls
            else "check the host, port, user and password settings"
        )
        failed = Check("connect", False, True, str(exc), consequence, fix)
        return None, failed
    return conn, Check("connect", True, True, f"as {settings.user}")


def _version(cur: pymysql.cursors.Cursor) -> str:
    cur.execute("SELECT VERSION()")
    row = cur.fetchone()
    return str(row[0]) if row else "unknown"


def check_sink(settings: MySQLSettings) -> tuple[str, list[Check]]:
    """(server description, checks) of the sink: that it answers, and its TLS."""
    conn, connected = _connect(settings, "the apply job cannot write to the sink")
    if conn is None:
        return "unreachable", [connected]
    with conn, conn.cursor() as cur:
        version = _version(cur)
        encryption = _tls(cur, settings)
    return version, [connected, encryption]


def _tls(cur: pymysql.cursors.Cursor, settings: MySQLSettings) -> Check:
    """Whether this session is encrypted, and how far the server's certificate was checked.
    Not required: `tls.mode` decides whether a plain connection is acceptable."""
    cur.execute("SHOW SESSION STATUS LIKE 'Ssl_%'")
    status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
    cipher = status.get("ssl_cipher", "")
    tls = settings.tls
    if not cipher and _loopback(settings.host):
        return Check("TLS", True, required=False, detail="not encrypted; loopback only")
    if not cipher:
        return Check(
            "TLS",
            False,
            required=False,
            detail=f"not encrypted (tls.mode={tls.mode})",
            consequence="rows and password hashes cross the network in plain text",
            fix="enable TLS on the server (ssl_cert, ssl_key) and set tls.mode: required and "
            "tls.ca",
        )
    verified = (
        f"certificate verified against tls.ca{' and the host name' if tls.checks_hostname else ''}"
        if tls.ca is not None
        else "certificate not verified (no tls.ca)"
    )
    version = status.get("ssl_version", "")
    return Check("TLS", True, required=False, detail=f"{version} {cipher}, {verified}".strip())


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_source(settings: MySQLSettings) -> tuple[str, list[Check]]:
    """(server description, checks). A connection failure is itself one failed check."""
    conn, connected = _connect(settings, "no reader can tail this server")
    if conn is None:
        return "unreachable", [connected]
    with conn, conn.cursor() as cur:
        version = _version(cur)
        mariadb = "mariadb" in version.lower()
        variables = _variables(cur)
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = " ".join(str(row[0]) for row in cur.fetchall()).upper()
        encryption = _tls(cur, settings)
    checks = [
        encryption,
        _expect(
            variables,
            "log_bin",
            "ON",
            "no binlog is written, nothing can be read",
            "start the server with --log-bin",
        ),
        _expect(
            variables,
            "binlog_format",
            "ROW",
            "statements cannot be turned into row changes",
            "set binlog_format=ROW",
        ),
        _expect(
            variables,
            "binlog_row_image",
            "FULL",
            "before-images miss columns; updates and deletes cannot be applied by key",
            "set binlog_row_image=FULL",
        ),
        _expect(
            variables,
            "binlog_row_metadata",
            "FULL",
            "column names and unsignedness are lost and go wrong after ALTER TABLE",
            "set binlog_row_metadata=FULL",
        ),
        *value_checks(variables),
        _gtid(variables, mariadb),
        _privileges(grants, mariadb),
    ]
    return f"{'MariaDB' if mariadb else 'MySQL'} {version}", checks


def _variables(cur: pymysql.cursors.Cursor) -> dict[str, str]:
    cur.execute(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
        "'binlog_row_image', 'binlog_row_metadata', 'gtid_mode', 'gtid_strict_mode', "
        "'gtid_domain_id', 'enforce_gtid_consistency', 'binlog_row_value_options', "
        "'binlog_transaction_compression', 'log_bin_compress', 'mysql56_temporal_format')"
    )
    return {str(k).lower(): str(v) for k, v in cur.fetchall()}


def _expect(variables: dict[str, str], name: str, wanted: str, consequence: str, fix: str) -> Check:
    got = variables.get(name, "(not supported)")
    return Check(
        f"{name}={wanted}",
        got.upper() == wanted,
        required=True,
        detail=f"is {got}",
        consequence=consequence,
        fix=fix,
    )


def value_checks(variables: dict[str, str]) -> list[Check]:
    """The settings (beyond binlog_format/row_image/row_metadata) under which a reader could not
    reproduce every value; each failing one is one line of `rowbus doctor`. The reader refuses
    the same ones at start-up (`REFUSED_SETTINGS`)."""
    return [
        *(
            _refuse(variables, s.variable, s.bad, s.wanted, s.consequence, s.fix)
            for s in REFUSED_SETTINGS
        ),
        _partial_json(variables),
        _compression(variables, "log_bin_compress"),
        _compression(variables, "binlog_transaction_compression"),
        _refuse(
            variables,
            "mysql56_temporal_format",
            lambda v: v.upper() in ("OFF", "0"),
            "=ON",
            "TIME/DATETIME/TIMESTAMP use MariaDB's old format, whose fractions and negative "
            "TIMEs cannot be read back exactly",
            "set mysql56_temporal_format=ON (then ALTER TABLE ... FORCE the temporal tables)",
        ),
    ]


def _partial_json(variables: dict[str, str]) -> Check:
    """MySQL's binlog_row_value_options: PARTIAL_JSON is read (each JSON diff applied to the
    row's before image, `rowbus.producer.jsondiff`), which needs the whole before image: the
    binlog_row_image=FULL check above. Reported so a user who turned it on sees it."""
    got = variables.get("binlog_row_value_options")
    if got is None:
        detail = "not on this server"
    elif "PARTIAL_JSON" in got.upper():
        detail = (
            f"is {got}: JSON diffs are applied to the before image (needs binlog_row_image=FULL)"
        )
    else:
        detail = f"is {got or '(empty)'}"
    return Check(
        "binlog_row_value_options PARTIAL_JSON or empty", True, required=True, detail=detail
    )


def _compression(variables: dict[str, str], name: str) -> Check:
    """MariaDB's log_bin_compress or MySQL's binlog_transaction_compression: either value is
    read (MariaDB's compressed events are inflated, `rowbus.producer.compressed`; MySQL's
    Transaction_payload events unpacked, `rowbus.producer.payload`); reported so a user who
    turned it on sees it is supported."""
    got = variables.get(name)
    if got is None:
        detail = "not on this server"
    elif got.upper() in ("ON", "1"):
        detail = f"is {got}: compressed events are decoded"
    else:
        detail = f"is {got}"
    return Check(f"{name} ON or OFF", True, required=True, detail=detail)


def _refuse(
    variables: dict[str, str],
    name: str,
    bad: Callable[[str], bool],
    wanted: str,
    consequence: str,
    fix: str,
) -> Check:
    """A setting that, when `bad`, makes some values unreproducible; a server without the
    setting (MariaDB has no binlog_row_value_options) passes."""
    got = variables.get(name)
    return Check(
        f"{name}{wanted if wanted.startswith('=') else ' ' + wanted}",
        got is None or not bad(got),
        required=True,
        detail="not on this server" if got is None else f"is {got or '(empty)'}",
        consequence=consequence,
        fix=fix,
    )


def _gtid(variables: dict[str, str], mariadb: bool) -> Check:
    consequence = "readers can resume only by file:position, not across a fail-over"
    if mariadb:
        # MariaDB always writes GTIDs; strict mode guarantees they are in order per domain.
        strict = variables.get("gtid_strict_mode", "OFF").upper() == "ON"
        domain = variables.get("gtid_domain_id", "?")
        return Check(
            "GTID enabled (MariaDB, strict mode)",
            strict,
            required=True,
            detail=f"domain {domain}, gtid_strict_mode={'ON' if strict else 'OFF'}",
            consequence=consequence,
            fix="set gtid_strict_mode=1",
        )
    mode = variables.get("gtid_mode", "OFF").upper()
    return Check(
        "GTID enabled (gtid_mode=ON)",
        mode == "ON",
        required=True,
        detail=f"gtid_mode={mode}",
        consequence=consequence,
        fix="set gtid_mode=ON and enforce_gtid_consistency=ON",
    )


def _privileges(grants: str, mariadb: bool) -> Check:
    if re.search(r"GRANT ALL PRIVILEGES ON \*\.\*", grants):
        return Check(
            "privileges for a binlog reader", True, required=True, detail="ALL PRIVILEGES ON *.*"
        )
    global_grants = " ".join(re.findall(r"GRANT (.*?) ON \*\.\*", grants))
    needed = {
        "REPLICATION SLAVE": ("REPLICATION SLAVE", "REPLICATION REPLICA"),
        ("BINLOG MONITOR" if mariadb else "REPLICATION CLIENT"): (
            "BINLOG MONITOR",
            "REPLICATION CLIENT",
            "SUPER",
        ),
        "SELECT": ("SELECT",),
    }
    missing = [
        name
        for name, aliases in needed.items()
        if not any(alias in global_grants for alias in aliases)
    ]
    return Check(
        "privileges for a binlog reader",
        not missing,
        required=True,
        detail="missing " + ", ".join(missing) if missing else global_grants.strip(),
        consequence="the reader cannot tail the binlog or read table schemas",
        fix=f"GRANT {', '.join(missing) or 'nothing'} ON *.* TO the reader's user",
    )
