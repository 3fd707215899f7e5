"""Every value type round-trips from a real table through Kafka; before-images stay right
across ALTER TABLE ADD/DROP COLUMN; a SchemaRecord precedes the rows using it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from rowbus.protocol.events import DdlChange, Op, Resolved, RowChange, SchemaRecord
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

TABLE = """CREATE TABLE t (
  id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, i INT,
  bi BIGINT, f FLOAT, d DOUBLE, dec1 DECIMAL(12,2), c CHAR(5), vc VARCHAR(64), bn BINARY(4),
  vb VARBINARY(10), tx TEXT, bl BLOB, dt DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(6),
  dd DATE, yr YEAR, b BIT(5), e ENUM('a','b'), s SET('x','y','z'), j JSON, lt LONGTEXT)"""

ROW = (
    "INSERT INTO t VALUES (18446744073709551615, -5, 65535, -100, 7, -9223372036854775808, "
    "1.5, 2.25, -12.34, 'ab', 'héllo 🎉', x'01020304', x'ff00', 'text', x'00ff', "
    "'2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.123', '-01:02:03.5', '2024-02-29', "
    "2024, b'10101', 'b', 'x,z', '{\"a\": 1}', 'long')"
)

EXPECTED = (
    18446744073709551615,
    -5,
    65535,
    -100,
    7,
    -9223372036854775808,
    1.5,
    2.25,
    Decimal("-12.34"),
    "ab",
    "héllo 🎉",
    b"\x01\x02\x03\x04",
    b"\xff\x00",
    "text",
    b"\x00\xff",
    dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
    dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC),
    -dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=500000),
    dt.date(2024, 2, 29),
    2024,
    0b10101,
    "b",
    frozenset({"x", "z"}),
    '{"a": 1}',
    "long",
)


def test_every_type_round_trips_and_images_follow_alter_table(reader_setup: ReaderSetup) -> None:
    setup = reader_setup
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(TABLE)
        with reader_thread(setup):
            data = TopicReader(setup.services, setup.data_topic)
            data.until(lambda rs: any(isinstance(r, Resolved) for r in rs), 120, "a first Resolved")
            cur.execute(ROW)
            cur.execute("INSERT INTO t (id) VALUES (1)")
            cur.execute("UPDATE t SET vc = 'changed' WHERE id = 1")
            cur.execute("ALTER TABLE t ADD COLUMN extra VARCHAR(10) DEFAULT 'x' AFTER ti")
            cur.execute("UPDATE t SET extra = 'y' WHERE id = 1")
            cur.execute("ALTER TABLE t DROP COLUMN si")
            cur.execute("DELETE FROM t WHERE id = 1")
            records = data.until(
                lambda rs: sum(isinstance(r, RowChange) for r in rs) >= 5,
                60,
                "five row changes",
            )
            data.close()
        schemas_reader = TopicReader(setup.services, setup.schemas_topic)
        schemas_reader.poll()
        schemas = {
            r.schema_id: r.table_schema
            for _, _, _, r in schemas_reader.records
            if isinstance(r, SchemaRecord)
        }
        schemas_reader.close()

    rows = sorted(
        (r for r in records if isinstance(r, RowChange)), key=lambda r: (r.ts, r.txn.index)
    )
    ddls = [r for r in records if isinstance(r, DdlChange)]
    assert [r.op for r in rows] == [Op.INSERT, Op.INSERT, Op.UPDATE, Op.UPDATE, Op.DELETE]
    for row in rows:
        assert row.schema_id in schemas, "every row's schema was published"
    first = rows[0]
    assert first.after == EXPECTED
    assert schemas[first.schema_id].primary_key == ("id",)

    upd1 = rows[2]
    t1 = schemas[upd1.schema_id]
    assert upd1.before_dict(t1)["vc"] is None  # type: ignore[index]
    assert upd1.after_dict(t1)["vc"] == "changed"  # type: ignore[index]

    upd2 = rows[3]
    t2 = schemas[upd2.schema_id]
    assert t2.column_names[:3] == ("id", "ti", "extra")
    before2, after2 = upd2.before_dict(t2), upd2.after_dict(t2)
    assert before2 is not None and after2 is not None
    assert (before2["extra"], after2["extra"], after2["vc"]) == ("x", "y", "changed")

    delete = rows[4]
    t3 = schemas[delete.schema_id]
    assert "si" not in t3.column_names
    gone = delete.before_dict(t3)
    assert gone is not None
    assert (gone["id"], gone["extra"], gone["vc"]) == (1, "y", "changed")

    # DDLs reach every partition, carry the schema after them, and come before later rows.
    alters = [d for d in ddls if d.statement.upper().startswith("ALTER")]
    assert {d.statement for d in alters} == {
        "ALTER TABLE t ADD COLUMN extra VARCHAR(10) DEFAULT 'x' AFTER ti",
        "ALTER TABLE t DROP COLUMN si",
    }
    assert len(alters) == 2 * 3
    add = next(d for d in alters if "ADD" in d.statement)
    assert add.table_schema is not None
    assert add.table_schema.column_names == t2.column_names
    assert add.table == "t"
    assert add.schema == setup.database
    # ts never decreases per partition
    for p in range(3):
        stamps = [r.ts for part, _, _, r in data.records if part == p and hasattr(r, "ts")]
        assert stamps == sorted(stamps)
