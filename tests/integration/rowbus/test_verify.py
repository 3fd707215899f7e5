"""`rowbus verify` on real servers: equal tables, listed differences, merged shards."""

from __future__ import annotations

import pytest

from rowbus.cli import main
from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from tests.conftest import connect

TABLE = "CREATE TABLE {name} (id INT, k VARCHAR(8), v VARCHAR(20) NULL, d DECIMAL(10,2), PRIMARY KEY (id, k))"


def fill(server, db: str, table: str, rows) -> None:
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute(TABLE.format(name=table))
        if rows:
            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", rows)


@pytest.fixture
def shard_setup(services: Settings, make_database, unique):
    """Two shards on source1, one on source2, routed to one target table on the sink."""
    name = unique("shop")
    dbs = {}
    for server in (services.sources[0], services.sources[1], services.resolved_sink):
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
        dbs[server.port] = name
    s1, s2, sink = services.sources[0], services.sources[1], services.resolved_sink
    shard_rows = {
        (s1, "orders_0"): [(i, "a", f"v{i}", i * 1.5) for i in range(0, 300, 3)],
        (s1, "orders_1"): [(i, "b", None if i % 7 == 0 else "", i) for i in range(1, 300, 3)],
        (s2, "orders_2"): [(i, "c", f"v{i}", 0) for i in range(2, 300, 3)],
    }
    for (server, table), rows in shard_rows.items():
        fill(server, name, table, rows)
    fill(sink, name, "orders", [r for rows in shard_rows.values() for r in rows])
    yield services, name
    for server in (s1, s2, sink):
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def run(services, name, chunk_rows=37):
    return verify(
        services,
        [RouteSettings(match=f"{name}.orders_*", target=f"{name}.orders")],
        [name],
        chunk_rows,
    )


def test_merged_shards_equal_their_union(shard_setup):
    _services, name = shard_setup
    [diff] = run(*shard_setup)
    assert diff.equal
    assert diff.source_rows == diff.target_rows == 300
    assert diff.chunks > 5
    assert sorted(diff.shards) == [
        f"source1:{name}.orders_0",
        f"source1:{name}.orders_1",
        f"source2:{name}.orders_2",
    ]


def test_differences_are_listed_by_key(shard_setup):
    services, name = shard_setup
    with connect(services.resolved_sink, name) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM orders WHERE id = 30")  # missing
        cur.execute("INSERT INTO orders VALUES (1000, 'z', 'x', 1)")  # extra
        cur.execute("UPDATE orders SET d = d + 0.01 WHERE id = 151")  # different
        cur.execute("UPDATE orders SET v = NULL WHERE id = 4")  # '' became NULL
    [diff] = run(*shard_setup)
    assert not diff.equal
    assert diff.missing == [(30, "a")]
    assert diff.extra == [(1000, "z")]
    assert sorted(diff.different) == [(4, "b"), (151, "b")]
    assert diff.differences == 4


def test_cli_exit_status_and_summary(shard_setup, capsys, tmp_path):
    services, name = shard_setup
    config = tmp_path / "rowbus.yaml"
    config.write_text(
        f"kafka: {{bootstrap_servers: '{services.kafka.bootstrap_servers}'}}\n"
        + "sources:\n"
        + "".join(f"  - {{name: {s.name}, port: {s.port}}}\n" for s in services.sources)
        + f"sink: {{port: {services.resolved_sink.port}}}\n"
    )
    args = [
        "-c",
        str(config),
        "verify",
        "--schema",
        name,
        "--route",
        f"{name}.orders_*={name}.orders",
    ]
    assert main(args) == 0
    assert "verify: EQUAL: 1 table(s), 0 differing" in capsys.readouterr().out
    with connect(services.resolved_sink, name) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM orders WHERE id < 10")
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "missing in target: (0, 'a'), (1, 'b')" in out
    assert "verify: DIFFERENT: 1 table(s), 1 differing, 10 differing key(s)" in out


def test_a_missing_target_table_is_a_difference(shard_setup):
    services, name = shard_setup
    with connect(services.resolved_sink, name) as conn, conn.cursor() as cur:
        cur.execute("DROP TABLE orders")
    [diff] = run(*shard_setup)
    assert diff.error == "the target table does not exist"
    assert not diff.equal


def test_a_table_without_a_primary_key_compares_as_a_multiset(services: Settings, unique) -> None:
    """Equal rows may repeat in a keyless table: one copy too few is a difference (a xor of row
    checksums would cancel a pair out), and the rows are listed by their values."""
    name = unique("keyless")
    source, sink = services.sources[0], services.resolved_sink
    rows = [(1, "x"), (1, "x"), (2, None), (3, "")]
    for server, mine in ((source, rows), (sink, rows[1:])):
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
            cur.execute(f"CREATE TABLE `{name}`.t (a INT, b VARCHAR(3))")
            cur.executemany(f"INSERT INTO `{name}`.t VALUES (%s, %s)", mine)
    try:
        [diff] = verify(services, [], [name])
        assert not diff.equal
        assert (diff.source_rows, diff.target_rows) == (4, 3)
        assert diff.missing == [(1, "x")] and diff.extra == []
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{name}`.t VALUES (1, 'x')")
        [diff] = verify(services, [], [name])
        assert diff.equal, diff
    finally:
        for server in (source, sink):
            with connect(server) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_text_in_any_character_set_compares_by_characters(services: Settings, unique) -> None:
    """Columns in character sets MariaDB cannot concatenate (gbk beside big5, sjis, utf32) are
    compared: a changed character is a difference; the same text in a sink column of another
    character set is not."""
    name = unique("charsets")
    source, sink = services.sources[0], services.resolved_sink
    source_t = "g VARCHAR(8) CHARSET gbk, b VARCHAR(8) CHARSET big5, s VARCHAR(8) CHARSET sjis"
    sink_t = "g VARCHAR(8) CHARSET utf8mb4, b VARCHAR(8) CHARSET big5, s VARCHAR(8) CHARSET sjis"
    rows = [(1, "中文", "測試", "テスト", "😀"), (2, "", " ", "ｱ", None)]
    for server, table in ((source, source_t), (sink, sink_t)):
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
            cur.execute(
                f"CREATE TABLE `{name}`.t (id INT PRIMARY KEY, {table}, u VARCHAR(4) CHARSET utf32)"
            )
            cur.executemany(f"INSERT INTO `{name}`.t VALUES (%s, %s, %s, %s, %s)", rows)
    try:
        [diff] = verify(services, [], [name])
        assert diff.equal, diff
        with connect(sink) as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE `{name}`.t SET b = '測驗' WHERE id = 1")
        [diff] = verify(services, [], [name])
        assert not diff.equal and diff.different == [(1,)], diff
    finally:
        for server in (source, sink):
            with connect(server) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_the_same_change_to_two_rows_of_one_length_is_a_difference(shard_setup):
    """A row checksum combined by XOR must not be affine (CRC32 is): rows 0 and 3 have texts of
    one length, and the same change at the same place in both cancelled out, so two rows given
    the same wrong value (a column default filled at another moment, a truncation) read as
    equal."""
    services, name = shard_setup
    with connect(services.resolved_sink, name) as conn, conn.cursor() as cur:
        cur.execute("UPDATE orders SET v = CONCAT('w', SUBSTRING(v, 2)) WHERE id IN (0, 3)")
    [diff] = run(*shard_setup)
    assert not diff.equal
    assert sorted(diff.different) == [(0, "a"), (3, "a")]


def test_a_source_that_shares_a_server_counts_only_its_own_schemas(
    services: Settings, unique
) -> None:
    # Two sources on one server, each with its own include_schemas (as the reader reads
    # them): each table is one shard of its target, not two (the union was counted twice).
    a, b = unique("own_a"), unique("own_b")
    server, sink = services.sources[0], services.resolved_sink
    try:
        for db in (a, b):
            for where in (server, sink):
                with connect(where) as conn, conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE `{db}`")
                fill(where, db, "t", [(i, "k", "v", i) for i in range(5)])
        shared = services.model_copy(
            update={
                "sources": (
                    server.model_copy(update={"name": "one", "include_schemas": (a,)}),
                    server.model_copy(update={"name": "two", "include_schemas": (b,)}),
                )
            }
        )
        diffs = verify(shared, schemas=[a, b])
        assert [(d.target, d.equal, d.source_rows) for d in diffs] == [
            (f"sink:{a}.t", True, 5),
            (f"sink:{b}.t", True, 5),
        ]
        assert [d.shards for d in diffs] == [[f"one:{a}.t"], [f"two:{b}.t"]]
    finally:
        for where in (server, sink):
            with connect(where) as conn, conn.cursor() as cur:
                for db in (a, b):
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
