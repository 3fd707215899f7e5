"""The reader's native row decoder (`rowbus.producer.fastrows`) against its pure-Python fallback:
the same binlog range read twice by `BinlogStream`, once with each, must give identical images
(values and their Python types), on the whole fidelity corpus (every type and edge value, in
inserts, updates and deletes) and on generated tables and values (hypothesis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rowbus.clients.settings import SourceConnection
from rowbus.config import MySQLSettings, Settings
from rowbus.producer import dumpframes, fastrows, tablemaps
from rowbus.producer.assembler import Rows, Xid
from rowbus.producer.binlog import BinlogStream
from rowbus.producer.exceptions import SourceUnavailableError
from rowbus.producer.server import SourceServer
from rowbus.producer.tables import TableFilter
from rowbus.producer.tracker import SchemaTracker
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.events import BinlogPosition, Op, RowChange, TableSchema, TxnRef
from tests.conftest import connect
from tests.integration.fidelity.corpus import CASES
from tests.integration.fidelity.test_generated import _TYPES
from tests.integration.txn_shapes.shapes import write_shapes

Decoded = list[tuple[str, str, Any, Any]]
RAW: list[tuple[Op, TableSchema, Any, Any]] = []
"""The images of the last fast read, untyped (for the encoder check)."""


def _typed(image: tuple[Any, ...] | None) -> Any:
    return None if image is None else tuple((type(v), v) for v in image)


def _binlog_end(server: MySQLSettings) -> tuple[str, int]:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def _stream(
    server: MySQLSettings,
    start: tuple[str, int],
    table_filter: TableFilter,
    fast: bool,
    framed: bool | None = None,
    tracker: SchemaTracker | None = None,
) -> BinlogStream:
    return BinlogStream(
        SourceConnection(
            name="fastpath",
            host=server.host,
            port=server.port,
            user=server.user,
            password=server.password,
        ),
        5_000_000 + uuid.uuid4().int % 1_000_000,
        start[0],
        start[1],
        table_filter,
        blocking=False,
        fast=fast,
        framed=framed,
        tracker=tracker,
    )


def _read(
    server: MySQLSettings,
    database: str,
    start: tuple[str, int],
    fast: bool,
    framed: bool | None = None,
) -> tuple[Decoded, BinlogStream]:
    """Every row of `database` from `start` to the binlog's current end, decoded one way."""
    stream = _stream(server, start, TableFilter(include_schemas=[database]), fast, framed)
    out: Decoded = []
    if fast:
        RAW.clear()
    try:
        for event in stream.events():
            if isinstance(event, Rows):
                images = event.decode()
                out.extend(
                    (event.op.value, event.table.table, _typed(b), _typed(a)) for b, a in images
                )
                if fast:
                    RAW.extend((event.op, event.table, b, a) for b, a in images)
    finally:
        stream.close()
    return out, stream


def _check_encoding() -> None:
    """Every row read natively, encoded natively: the protocol's bytes."""
    for n, (op, table, before, after) in enumerate(RAW):
        row = RowChange(
            source="src",
            ts=1 << 60,
            op=op,
            schema=table.schema,
            table=table.table,
            schema_id=table.schema_id,
            primary_key=table.primary_key,
            before=before,
            after=after,
            txn=TxnRef("0-1-2", n, n + 1),
            position=BinlogPosition("binlog.000001", 4 + n, "0-1-2"),
        )
        native = fastrows.change_value(
            row.source,
            row.ts,
            op,
            row.schema,
            row.table,
            row.schema_id,
            row.primary_key,
            before,
            after,
            row.txn.id,
            row.txn.index,
            row.txn.count,
            row.position,
        )
        assert native == encode(row, Encoding.PROTOBUF)[0], row


def _native_tables(stream: BinlogStream) -> set[str]:
    return {table.table for table, _, plan in stream.tables.layouts.values() if plan is not None}


@pytest.fixture
def database(services: Settings) -> Iterator[tuple[MySQLSettings, str]]:
    server = services.sources[0]
    name = f"fast_{uuid.uuid4().hex[:8]}"
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    try:
        yield server, name
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_the_native_decoder_is_built() -> None:
    # `make setup` / `pip install -e .` compile it; without it every table takes the pure path.
    assert fastrows.AVAILABLE


def test_both_paths_agree_on_the_fidelity_corpus(database: tuple[MySQLSettings, str]) -> None:
    server, db = database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET SESSION sql_mode = ''")
        for case in CASES:
            cur.execute(case.create())
        start = _binlog_end(server)
        for case in CASES:
            for statement in case.inserts():
                cur.execute(statement)
            n = len(case.literals)
            # Updates: every row takes the next row's value (NULL included), in one statement
            # per row so both images carry edge values; then every other row is deleted.
            for i in range(n + 1):
                source = (i + 1) % (n + 1)
                cur.execute(
                    f"UPDATE `{case.table}` SET v = (SELECT v FROM (SELECT v FROM "
                    f"`{case.table}` WHERE id = {source}) AS s) WHERE id = {i}"
                )
            cur.execute(f"DELETE FROM `{case.table}` WHERE id % 2 = 0")
    before = (fastrows.Counts.native, fastrows.Counts.fallback)
    fast, stream = _read(server, db, start, fast=True)
    pure, _ = _read(server, db, start, fast=False)
    assert len(pure) > sum(len(c.literals) + 1 for c in CASES)
    assert fast == pure
    # Every table (MariaDB's JSON is a LONGTEXT) and every event was read natively.
    assert _native_tables(stream) == {c.table for c in CASES}
    assert fastrows.Counts.fallback == before[1]
    assert fastrows.Counts.native - before[0] >= 3 * len(CASES)
    _check_encoding()


@st.composite
def _tables(draw: Any) -> tuple[list[str], list[list[str]]]:
    types = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=8))
    rows = draw(
        st.lists(
            st.tuples(*[st.none() | _TYPES[t] for t in types]).map(
                lambda r: ["NULL" if v is None else v for v in r]
            ),
            min_size=2,
            max_size=4,
        )
    )
    return types, rows


@settings(
    derandomize=True,  # the same examples on every CI run
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=_tables())
def test_both_paths_agree_on_generated_values(
    database: tuple[MySQLSettings, str], table: tuple[list[str], list[list[str]]]
) -> None:
    server, db = database
    types, rows = table
    name = f"g_{uuid.uuid4().hex[:8]}"
    columns = ", ".join(f"c{i} {t}" for i, t in enumerate(types))
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, {columns})")
        start = _binlog_end(server)
        values = ", ".join(f"({i}, {', '.join(r)})" for i, r in enumerate(rows))
        cur.execute(f"INSERT INTO `{name}` VALUES {values}")
        # Each row takes the next one's values (one multi-row update event), then half go.
        sets = ", ".join(
            f"c{i} = (SELECT c{i} FROM (SELECT * FROM `{name}`) AS s "
            f"WHERE s.id = (`{name}`.id + 1) % {len(rows)})"
            for i in range(len(types))
        )
        cur.execute(f"UPDATE `{name}` SET {sets}")
        cur.execute(f"DELETE FROM `{name}` WHERE id % 2 = 1")
    fallbacks = fastrows.Counts.fallback
    fast, stream = _read(server, db, start, fast=True)
    pure, _ = _read(server, db, start, fast=False)
    assert len(pure) >= len(rows) + len(rows) // 2
    assert fast == pure
    assert _native_tables(stream) == {name}
    assert fastrows.Counts.fallback == fallbacks
    _check_encoding()


def test_table_maps_parsed_once_per_layout_decode_as_the_library_parses_them(
    database: tuple[MySQLSettings, str],
) -> None:
    # Single-row transactions (one table map each), an ALTER TABLE between them, and a second
    # table: the cached table maps must give the rows and schemas of a fresh parse each time.
    server, db = database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(8), e ENUM('x','y'))")
        cur.execute("CREATE TABLE b (id BIGINT PRIMARY KEY, d DECIMAL(6,2))")
        start = _binlog_end(server)
        for n in range(20):
            cur.execute(f"INSERT INTO a (id, v, e) VALUES ({n}, 'r{n}', 'y')")
            cur.execute(f"INSERT INTO b VALUES ({n}, {n}.5)")
            if n == 9:
                cur.execute("ALTER TABLE a ADD COLUMN w INT DEFAULT 7, MODIFY v VARCHAR(300)")
            cur.execute(f"UPDATE a SET v = 'u{n}' WHERE id = {n}")

    def read(cached: bool) -> list[Any]:
        tablemaps.install(enabled=cached)
        try:
            # Framed by the library: the framed path keeps its own table map cache.
            rows, stream = _read(server, db, start, fast=True, framed=False)
        finally:
            tablemaps.install()
        return [rows, sorted((t.table, t.schema_id) for t, _, _ in stream.tables.layouts.values())]

    reused = tablemaps.Stats.reused
    cached = read(cached=True)
    assert tablemaps.Stats.reused - reused >= 50
    assert cached == read(cached=False)
    assert len(cached[1]) == 3  # a, a after the ALTER, b


def _events(
    server: MySQLSettings, start: tuple[str, int], schemas: list[str], framed: bool
) -> list[Any]:
    """Every assembler event from `start` to the binlog's end, rows decoded, framed one way; a
    schema tracker follows the DDL (so table maps after an ALTER are re-planned)."""
    source = SourceConnection(
        name="framed",
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
    )
    out: list[Any] = []
    with SourceServer(source) as live:
        tracker = SchemaTracker(
            live.catalog.table_extras, live.catalog.charsets, live.catalog.database_collation
        )
        stream = _stream(server, start, TableFilter(include_schemas=schemas), True, framed, tracker)
        _collect(stream, out)
    return out


def _collect(stream: BinlogStream, out: list[Any]) -> None:
    try:
        for event in stream.events():
            if isinstance(event, Rows):
                images = [(_typed(b), _typed(a)) for b, a in event.decode()]
                out.append(("rows", event.op, event.table, event.end, images))
            else:
                out.append(event)
    finally:
        stream.close()


def test_the_framed_stream_gives_the_librarys_events_on_every_shape(
    database: tuple[MySQLSettings, str],
) -> None:
    # The fidelity corpus (every type), then every transaction shape (XA, MyISAM, DDL, savepoints,
    # filtered schemas, ...), read once framed by `dumpframes` and once by mysql-replication:
    # the same events, positions, GTIDs, timestamps and decoded rows, in the same order.
    server, db = database
    other, filtered = f"{db}_o", f"{db}_f"
    with connect(server) as conn, conn.cursor() as cur:
        for name in (other, filtered):
            cur.execute(f"CREATE DATABASE `{name}`")
    try:
        start = _binlog_end(server)
        with connect(server, db) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET SESSION sql_mode = ''")
            for case in CASES:
                cur.execute(case.create())
                for statement in case.inserts():
                    cur.execute(statement)
                cur.execute(f"UPDATE `{case.table}` SET id = id + 1000")
                cur.execute(f"DELETE FROM `{case.table}` WHERE id % 2 = 0")
        write_shapes(server, db, other, filtered)
        packets = dumpframes.Stats.packets
        framed = _events(server, start, [db, other], framed=True)
        assert dumpframes.Stats.packets - packets > len(CASES) * 4
        library = _events(server, start, [db, other], framed=False)
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            for name in (other, filtered):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    kinds = {type(e).__name__ if not isinstance(e, tuple) else "rows" for e in library}
    assert {"rows", "GtidMark", "Xid", "Query", "Skipped", "XaPrepare"} <= kinds, kinds
    assert len(framed) == len(library)
    for n, (a, b) in enumerate(zip(framed, library, strict=True)):
        assert a == b, n


def test_a_reader_framed_on_a_checksummed_binlog(database: tuple[MySQLSettings, str]) -> None:
    # The stack's sources write binlog_checksum=CRC32: the framed path must strip the 4 bytes
    # (a rows event read with them would decode a trailing garbage row or fail).
    server, db = database
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.binlog_checksum")
        row = cur.fetchone()
    assert row is not None and row[0] == "CRC32"
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
        start = _binlog_end(server)
        cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    rows, stream = _read(server, db, start, fast=True, framed=True)
    assert stream._framed
    assert rows == [
        ("insert", "t", None, ((int, 1), (str, "a"))),
        ("insert", "t", None, ((int, 2), (str, "b"))),
    ]


def test_a_dropped_framed_stream_raises_source_unavailable(
    database: tuple[MySQLSettings, str],
) -> None:
    # The dump thread killed on the server while the framed stream waits for events: the reader
    # must see SourceUnavailableError (it then resumes from its last transaction end), never a
    # hang or a silent end.
    server, db = database
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        start = _binlog_end(server)
        cur.execute("INSERT INTO t VALUES (1)")
    stream = BinlogStream(
        SourceConnection(
            name="dropped",
            host=server.host,
            port=server.port,
            user=server.user,
            password=server.password,
        ),
        5_000_000 + uuid.uuid4().int % 1_000_000,
        start[0],
        start[1],
        TableFilter(include_schemas=[db]),
        heartbeat_s=0.5,
        read_timeout_s=30,
        blocking=True,
    )
    seen: list[Any] = []
    packets = dumpframes.Stats.packets
    try:
        with pytest.raises(SourceUnavailableError):
            _follow_and_kill(server, stream, seen)
    finally:
        stream.close()
    assert stream._framed
    assert any(isinstance(e, Rows) for e in seen)
    assert dumpframes.Stats.packets > packets


def _follow_and_kill(server: MySQLSettings, stream: BinlogStream, seen: list[Any]) -> None:
    for event in stream.events():
        seen.append(event)
        if isinstance(event, Xid):
            _kill_dump_threads(server, stream)


def _kill_dump_threads(server: MySQLSettings, stream: BinlogStream) -> None:
    assert stream._reader is not None
    own = stream._reader._stream_connection.thread_id()
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"KILL {int(own)}")
