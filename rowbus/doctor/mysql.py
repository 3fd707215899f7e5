"""Check that a source server writes the binlog a reader needs and grants what it needs (and
no more: a reader's user that may write gets a warning), that the sink grants the apply job
what it needs, and that the connections to the sources and the sink are encrypted as
configured."""

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


def check_sink(settings: MySQLSettings, state_database: str) -> tuple[str, list[Check]]:
    """(server description, checks) of the sink: that it answers, its TLS, and the grants
    the apply job needs (on `state_database`, and on the targets)."""
    conn, connected = _connect(settings, "the apply job cannot write to the sink")
    if conn is None:
        return "unreachable", [connected]
    with conn, conn.cursor() as cur:
        version = _version(cur)
        encryption = _tls(cur, settings)
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = " ".join(str(row[0]) for row in cur.fetchall()).upper()
    return version, [connected, encryption, *_sink_privileges(grants, state_database)]


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
        _excess(grants, mariadb),
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


READER_NEEDS = ("REPLICATION SLAVE", "BINLOG MONITOR", "SELECT")
"""What a binlog reader's user needs on a MariaDB source, all ``ON *.*`` (MySQL: REPLICATION
CLIENT for BINLOG MONITOR): the dump, the binlog's position and the tables' schemas and
snapshots. docs/operations.md lists it beside the sink's."""
_READER_MAY = frozenset(
    {"USAGE", "REPLICATION SLAVE", "REPLICATION REPLICA", "BINLOG MONITOR", "REPLICATION CLIENT",
     "SELECT"}
)  # fmt: skip
"""`READER_NEEDS` under each of its names, and USAGE (no privilege): anything else is more
than a reader needs, and a warning."""
_GRANT = re.compile(r"GRANT (.*?) ON (\S+) TO ")


def _grants_by_scope(grants: str) -> dict[str, set[str]]:
    """``SHOW GRANTS`` text (upper case) as scope (``*.*``, ``DB.*``, ``DB.T``, back-quotes and
    escapes dropped) → privileges; a ``WITH GRANT OPTION`` is the privilege ``GRANT OPTION``."""
    found: dict[str, set[str]] = {}
    for statement in re.split(r"(?<!WITH )(?=GRANT )", grants):
        m = _GRANT.match(statement.strip())
        if m is None or m.group(1).startswith("PROXY"):
            continue
        scope = m.group(2).replace("`", "").replace("\\", "")
        privileges = {p.strip() for p in m.group(1).split(",")}
        if "WITH GRANT OPTION" in statement:
            privileges.add("GRANT OPTION")
        found.setdefault(scope, set()).update(privileges)
    return found


def _excess(grants: str, mariadb: bool) -> Check:
    """A warning when the reader's user holds anything it does not need: a leaked reader
    password should let no one write, drop, grant, or watch other sessions."""
    extra = sorted(
        f"{privilege} ON {scope}"
        for scope, privileges in _grants_by_scope(grants).items()
        for privilege in privileges
        if privilege not in _READER_MAY
    )
    needs = ", ".join(READER_NEEDS if mariadb else ("REPLICATION SLAVE", "REPLICATION CLIENT",
                                                    "SELECT"))  # fmt: skip
    return Check(
        "a binlog reader's user holds no more than it needs",
        not extra,
        required=False,
        detail=f"also holds {', '.join(extra)}" if extra else f"at most {needs} ON *.*",
        consequence="whoever learns this password can do more than read the binlog and the "
        "tables (change or drop data, grant, see other sessions)",
        fix=f"give the readers a user of their own with only {needs} ON *.* "
        "(REVOKE ALL PRIVILEGES, GRANT OPTION FROM the user; then GRANT those)",
    )


SINK_STATE_NEEDS = ("CREATE", "SELECT", "INSERT", "UPDATE", "DELETE")
"""What the apply job's user needs on apply.state_database (its checkpoint, head, state and
stash tables, created by the job)."""
SINK_TARGET_NEEDS = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP", "INDEX")
"""What it needs on the target databases: rows written and read back (`rowbus verify`), and
the DDL applied at its barrier (CREATE, ALTER, DROP, INDEX)."""


def _sink_privileges(grants: str, state_database: str) -> list[Check]:
    """The apply job's needs: required on its state database (else it stops at start), a
    warning for the target tables when no global grant covers them (a grant per target
    database may: the doctor does not know which databases the routes reach)."""
    scopes = _grants_by_scope(grants)
    everywhere = scopes.get("*.*", set())
    if "ALL PRIVILEGES" in everywhere:
        everywhere = everywhere | set(SINK_TARGET_NEEDS) | set(SINK_STATE_NEEDS)
    state = everywhere | scopes.get(f"{state_database.upper()}.*", set())
    if "ALL PRIVILEGES" in state:
        state = state | set(SINK_STATE_NEEDS)
    missing = [p for p in SINK_STATE_NEEDS if p not in state]
    targets = [p for p in SINK_TARGET_NEEDS if p not in everywhere]
    return [
        Check(
            f"privileges for the apply job's state ({state_database})",
            not missing,
            required=True,
            detail="missing " + ", ".join(missing) if missing else ", ".join(SINK_STATE_NEEDS),
            consequence="the apply job cannot keep its checkpoints: it stops at start",
            fix=f"GRANT {', '.join(missing) or 'nothing'} ON `{state_database}`.* TO the sink's "
            "user",
        ),
        Check(
            "privileges for the apply job's targets",
            not targets,
            required=False,
            detail=f"not granted ON *.*: {', '.join(targets)} (a grant per target database "
            "may hold them)"
            if targets
            else ", ".join(SINK_TARGET_NEEDS) + " ON *.*",
            consequence="a batch that writes a target the user may not write stops the job",
            fix=f"GRANT {', '.join(targets) or 'nothing'} ON each target database TO the "
            "sink's user",
        ),
    ]
