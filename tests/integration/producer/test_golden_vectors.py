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

from rowbus.config import Settings
from rowbus.protocol import golden
from rowbus.protocol.events import RowChange, SchemaRecord
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

UTF8 = "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
CREATE = f"""CREATE TABLE edge_values (
  id INT NOT NULL PRIMARY KEY,
  tags SET('a','b') {UTF8},
  vb VARBINARY(8), bl BLOB, code BINARY(4),
  short TIME(6), least TIME(6), day DATE, at DATETIME(3), seen TIMESTAMP NULL, part DATE,
  yr YEAR,
  l1 VARCHAR(8) CHARACTER SET latin1 COLLATE latin1_swedish_ci,
  e ENUM('x','y') {UTF8},
  c CHAR(5) {UTF8},
  vc VARCHAR(8) {UTF8},
  doc JSON, u64 BIGINT UNSIGNED, bits BIT(64))"""
# Each edge form written as a user would: a lenient session stores the zero dates, the zero
# month and the ENUM error value; latin1 bytes C3 81 arrive as bytes.
INSERT = """INSERT INTO edge_values VALUES (
  1, '', X'', X'', 'a',
  '-00:00:00.25', '-838:59:59.999999', '0000-00-00', '0000-00-00 00:00:00.000',
  '0000-00-00 00:00:00', '2024-00-15', 0,
  X'C381', 'not a member', 'ab   ', 'ab  ',
  '{"a": [1, 2.5, null, true], "b": "x"}', 18446744073709551615, b'{bits}')""".replace(
    "{bits}", "1" * 64
)


def test_the_edge_value_vector_is_the_readers_real_output(
    services: Settings, make_reader_setup: Callable[..., ReaderSetup]
) -> None:
    setup = make_reader_setup(1)
    with reader_thread(setup, heartbeat_interval_s=0.3) as reader:
        wait_for(lambda: reader.metrics.heartbeats > 0, timeout=60, what="a first heartbeat")
        with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
            cur.execute(CREATE)  # the schema comes from the reader's own copy (its DDL path)
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute(INSERT)
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
    want = golden.EDGE_TYPES
    differ = [(g, w) for g, w in zip(published.columns, want.columns, strict=True) if g != w]
    assert differ == [], "\n".join(f"{g}\n  vector: {w}" for g, w in differ)
    assert published.primary_key == want.primary_key
    assert published.indexes == want.indexes
    values = zip(row.after or (), golden.EDGE_VALUES, strict=True)
    assert [(c.name, g, w) for c, (g, w) in zip(want.columns, values, strict=True) if g != w] == []
    assert row.op is golden.SAMPLES["row_edge_values"].op  # type: ignore[union-attr]
