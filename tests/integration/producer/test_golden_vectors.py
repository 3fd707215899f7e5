"""The golden edge-value vector is what the real reader publishes (issue 32: vectors from real
output, not hand-built events).

The table of `golden.EDGE_TYPES` is created on a real source with every edge form of
PROTOCOL.md §2.1 inserted from a lenient session, carried by the real reader through Kafka, and
the published row and table schema are compared with the vector's: its values field for field
(`row_edge_values`) and its columns (types, lengths, nullability, charsets, collations,
defaults) — so a decoder that passes the vector reads what rowbus really sends.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.protocol import golden
from rowbus.protocol.events import RowChange, SchemaRecord, TableSchema
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

UTF8 = "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
EDGE = [
    f"""CREATE TABLE edge_values (
  id INT NOT NULL PRIMARY KEY,
  tags SET('a','b') {UTF8},
  vb VARBINARY(8), bl BLOB, code BINARY(4),
  short TIME(6), least TIME(6), day DATE, at DATETIME(3), seen TIMESTAMP NULL, part DATE,
  yr YEAR,
  l1 VARCHAR(8) CHARACTER SET latin1 COLLATE latin1_swedish_ci,
  e ENUM('x','y') {UTF8},
  c CHAR(5) {UTF8},
  vc VARCHAR(8) {UTF8},
  doc JSON, u64 BIGINT UNSIGNED, bits BIT(64), y0 DATE)""",
    # Each edge form written as a user would: a lenient session stores the zero dates, the
    # zero month and the ENUM error value; latin1 bytes C3 81 arrive as bytes.
    "SET SESSION sql_mode = ''",
    f"""INSERT INTO edge_values VALUES (
  1, '', X'', X'', 'a',
  '-00:00:00.25', '-838:59:59.999999', '0000-00-00', '0000-00-00 00:00:00.000',
  '0000-00-00 00:00:00', '2024-00-15', 0,
  X'C381', 'not a member', 'ab   ', 'ab  ',
  '{{"a": [1, 2.5, null, true], "b": "x"}}', 18446744073709551615, b'{"1" * 64}',
  '0000-01-01')""",
]
ALL = [
    f"""CREATE TABLE all_types (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY, i INT NOT NULL DEFAULT 7, big BIGINT,
  name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT 'it''s',
  amount DECIMAL(65,30), created DATETIME(6),
  seen TIMESTAMP(6) NULL DEFAULT CURRENT_TIMESTAMP(6),
  ratio DOUBLE, f FLOAT, flag TINYINT, body TEXT {UTF8}, day DATE, dur TIME(6), yr YEAR,
  bits BIT(12), state ENUM('new','paid','shipped') {UTF8}, tags SET('a','b','c') {UTF8},
  doc JSON, raw BLOB, code BINARY(4),
  UNIQUE KEY by_name (name, i), KEY by_day (day))""",
    # the `ddl` sample's statement
    "ALTER TABLE all_types ADD COLUMN gone VARCHAR(8) CHARACTER SET latin1",
    "SET SESSION time_zone = '+00:00'",
    """INSERT INTO all_types VALUES (
  18446744073709551615, -2147483648, -9223372036854775808, 'Zoë 😀',
  -12345678901234567890123456789012345.123456789012345678901234567890,
  '2024-05-01 12:30:45.123456', '2024-05-01 10:30:45.000005', -1.5e-300, 0.1, -128,
  'line1\nline2 "quoted" \\\\ tab\t', '1000-01-01', '-838:59:59.999999', 2155,
  b'101000000001', 'paid', 'a,c', '{"k": [1, 2.5, null]}', X'0001FEFF', 'ab', NULL)""",
]


@pytest.mark.parametrize(
    ("sample", "statements", "table"),
    [("row_edge_values", EDGE, golden.EDGE_TYPES), ("row_insert", ALL, golden.ALL_TYPES)],
)
def test_the_row_vectors_are_the_readers_real_output(
    sample: str,
    statements: list[str],
    table: TableSchema,
    services: Settings,
    make_reader_setup: Callable[..., ReaderSetup],
) -> None:
    setup = make_reader_setup(1)
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            for sql in statements:  # the schema comes from the reader's own copy (DDL path)
                cur.execute(sql)
        data = TopicReader(services, setup.data_topic)
        rows = data.until(
            lambda rs: any(isinstance(r, RowChange) for r in rs), timeout=60, what="the row"
        )
        data.close()
        (row,) = [r for r in rows if isinstance(r, RowChange)]
        schemas = TopicReader(services, setup.schemas_topic)
        found = schemas.until(
            lambda rs: any(
                isinstance(r, SchemaRecord) and r.schema_id == row.schema_id for r in rs
            ),
            timeout=60,
            what="the row's schema",
        )
        schemas.close()
    (published,) = {
        r.table_schema
        for r in found
        if isinstance(r, SchemaRecord) and r.schema_id == row.schema_id
    }
    want = table
    vector = golden.SAMPLES[sample]
    assert isinstance(vector, RowChange)
    differ = [(g, w) for g, w in zip(published.columns, want.columns, strict=True) if g != w]
    assert differ == [], "\n".join(f"{g}\n  vector: {w}" for g, w in differ)
    assert published.primary_key == want.primary_key
    assert published.indexes == want.indexes
    values = zip(row.after or (), vector.after or (), strict=True)
    assert [(c.name, g, w) for c, (g, w) in zip(want.columns, values, strict=True) if g != w] == []
    assert row.op is vector.op
    # the same id once in the vector's database and table (the id covers their names)
    moved = TableSchema(
        table.schema, table.table, published.columns, published.primary_key, published.indexes
    )
    assert moved.schema_id == vector.schema_id == table.schema_id
