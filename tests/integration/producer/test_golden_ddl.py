"""The golden DDL vectors are what the real reader publishes (issue 32: vectors from real output,
not hand-built events).

One statement of every DDL kind of PROTOCOL.md §1.2 (and the `alter_table` forms a consumer
must tell apart: a column added NOT NULL without a DEFAULT, a DATETIME `DEFAULT
CURRENT_TIMESTAMP` from a ``+05:30`` session, a column renamed, ``ALTER … RENAME TO``) runs on a
real MariaDB; the reader's published `DdlChange` records, masked, are compared with
`protocol/testdata/reader_ddl.json`, from which `python -m rowbus.protocol.golden` builds the
`reader_ddl_*` vectors of the manifest (every encoding, headers, expected record). The test
fails when the reader's output drifts from the stored vectors.

Masked, because they depend on the run and not on the reader's rules: `source` (a name unique
to the test), the databases' names (in `schema`, `table_schema` and the statement), `ts` and
`timestamp_us` (the clocks: fixed values one apart, `timestamp_us` at `ts`'s millisecond as §3
requires), `position` (the binlog's file, offset and GTID: fixed ones in the statements'
order) and `txn.id` (the GTID). Everything else — kind, table, the statement as the server
logged it, the table schema, `sql_mode`, `time_zone`, `txn.index`/`count` — is compared as
published.

Re-capture after a deliberate change (then rebuild the vectors and read the diff)::

    ROWBUS_RECAPTURE_VECTORS=1 .venv/bin/pytest tests/integration/producer/test_golden_ddl.py
    .venv/bin/python -m rowbus.protocol.golden
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

from rowbus.config import Settings
from rowbus.protocol import golden
from rowbus.protocol.codec.jsonc import to_json
from rowbus.protocol.events import BinlogPosition, DdlChange, TxnRef
from rowbus.protocol.hlc import physical_ms
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

SHOP, SCRATCH = "shop", "scratch"
"""The masked names of the test's database and of the one its DDLs create and drop."""
UTF8_BIN = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
STATEMENTS: list[tuple[str | None, str]] = [
    # (vector name, statement); None: a session setting, which publishes nothing
    (None, "SET SESSION time_zone = '+00:00'"),
    (
        "create_table",
        f"CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(20) {UTF8_BIN} "
        "DEFAULT 'it''s', qty INT NOT NULL DEFAULT 1, KEY by_qty (qty))",
    ),
    ("create_table_like", "CREATE TABLE orders_copy LIKE orders"),
    ("alter_add_not_null", "ALTER TABLE orders ADD COLUMN paid TINYINT NOT NULL"),
    (None, "SET SESSION time_zone = '+05:30'"),
    (
        "alter_add_current_timestamp",
        "ALTER TABLE orders ADD COLUMN placed DATETIME DEFAULT CURRENT_TIMESTAMP",
    ),
    (None, "SET SESSION time_zone = '+00:00'"),
    ("alter_rename_column", f"ALTER TABLE orders CHANGE note remark VARCHAR(20) {UTF8_BIN}"),
    ("alter_rename_to", "ALTER TABLE orders_copy RENAME TO orders_old"),
    ("create_index", "CREATE INDEX by_remark ON orders (remark)"),
    ("drop_index", "DROP INDEX by_remark ON orders"),
    ("truncate_table", "TRUNCATE TABLE orders"),
    ("create_table_a", "CREATE TABLE a (id INT NOT NULL PRIMARY KEY)"),
    ("rename_table", "RENAME TABLE a TO b, orders_old TO c"),
    ("drop_table", "DROP TABLE b, c"),
    ("other", "CREATE VIEW v AS SELECT id FROM orders"),
    ("create_database", "CREATE DATABASE {scratch}"),
    ("alter_database", "ALTER DATABASE {scratch} CHARACTER SET latin1"),
    ("drop_database", "DROP DATABASE {scratch}"),
]
NAMES = [name for name, _ in STATEMENTS if name is not None]


def test_the_ddl_vectors_are_the_readers_real_output(
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
    unique: Callable[[str], str],
) -> None:
    setup = make_reader_setup(1)
    scratch = unique("scratch")
    try:
        published = _capture(services, setup, scratch)
    finally:
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{scratch}`")
    got = masked(published, {setup.database: SHOP, scratch: SCRATCH})
    if os.environ.get("ROWBUS_RECAPTURE_VECTORS"):
        golden.READER_DDL_FILE.write_text(json.dumps(_stored(got), indent=2) + "\n")
    stored = json.loads(golden.READER_DDL_FILE.read_text())["records"]
    drift = [
        f"{name}:\n  published {json.dumps(got.get(name))}\n  stored    {json.dumps(want)}"
        for name, want in stored.items()
        if got.get(name) != want
    ]
    assert sorted(got) == sorted(stored), "the statements and the stored vectors differ"
    assert drift == [], "the reader's DDL output drifted from the vectors:\n" + "\n".join(drift)


def _capture(services: Settings, setup: ReaderSetup, scratch: str) -> list[DdlChange]:
    """The DdlChange records the reader publishes for `STATEMENTS`, in order."""
    with reader_thread(
        setup, heartbeat_interval_s=0.3, include_schemas=[setup.database, scratch]
    ) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            for _, sql in STATEMENTS:
                cur.execute(sql.format(scratch=f"`{scratch}`"))
        data = TopicReader(services, setup.data_topic)
        try:
            records = data.until(
                lambda rs: sum(isinstance(r, DdlChange) for r in rs) >= len(NAMES),
                timeout=60,
                what=f"the {len(NAMES)} DDLs",
            )
        finally:
            data.close()
    ddls = [r for r in records if isinstance(r, DdlChange)]
    assert len(ddls) == len(NAMES), [d.statement for d in ddls]
    return ddls


def masked(ddls: list[DdlChange], databases: dict[str, str]) -> dict[str, Any]:
    """`ddls` named as `NAMES` says, in the JSON form of §5.3, masked (module docstring)."""
    out: dict[str, Any] = {}
    for i, (name, ddl) in enumerate(zip(NAMES, ddls, strict=True)):
        ts = golden.TS + 100 + i
        gtid = f"1-1-{100 + i}"
        statement = ddl.statement
        for real, fixed in databases.items():
            statement = statement.replace(real, fixed)
        table_schema = ddl.table_schema
        if table_schema is not None:
            table_schema = dataclasses.replace(
                table_schema, schema=databases.get(table_schema.schema, table_schema.schema)
            )
        record = dataclasses.replace(
            ddl,
            source="db1",
            ts=ts,
            schema=databases.get(ddl.schema, ddl.schema),
            statement=statement,
            table_schema=table_schema,
            position=BinlogPosition("binlog.000042", 130_000 + 100 * i, gtid),
            txn=None if ddl.txn is None else TxnRef(gtid, ddl.txn.index, ddl.txn.count),
            timestamp_us=None if ddl.timestamp_us is None else physical_ms(ts) * 1000,
        )
        out[name] = to_json(record)
    return out


def _stored(records: dict[str, Any]) -> dict[str, Any]:
    return {
        "about": "DdlChange records the real reader published for the statements of "
        "tests/integration/producer/test_golden_ddl.py on MariaDB, masked as its docstring "
        "says; python -m rowbus.protocol.golden builds the reader_ddl_* vectors from them",
        "statements": {
            name: sql.format(scratch=SCRATCH) for name, sql in STATEMENTS if name is not None
        },
        "records": records,
    }
