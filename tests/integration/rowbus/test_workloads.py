"""The reference workloads run on a real source and do what the design says."""

from __future__ import annotations

from rowbus.workloads import W1, W2, W3, W3_DDLS, Bulk
from tests.conftest import connect


def count(conn, sql: str) -> int:
    with conn.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def test_w1_writes_100_row_transactions(services, make_database):
    db = make_database(services.sources[0])
    with connect(services.sources[0], autocommit=False) as conn:
        w1 = W1(db)
        w1.create(conn)
        assert sum(w1.step(conn) for _ in range(3)) == 300
        assert count(conn, f"SELECT COUNT(*) FROM `{db}`.w1") == 300


def test_w2_is_deterministic_and_keeps_its_key_sets(services, make_database):
    finals = []
    for _ in range(2):
        db = make_database(services.sources[0])
        with connect(services.sources[0], autocommit=False) as conn:
            w2 = W2(db, initial_rows=40)
            w2.create(conn)
            for _ in range(300):
                w2.step(conn)
            rows = []
            for index, name in enumerate(w2.names()):
                with conn.cursor() as cur:
                    cur.execute(
                        f"SELECT id, qty, label, price, updated FROM `{db}`.{name} ORDER BY id"
                    )
                    table_rows = cur.fetchall()
                assert [r[0] for r in table_rows] == sorted(w2.keys[index])
                rows.append(table_rows)
            finals.append(rows)
    assert finals[0] == finals[1]


def test_w3_shards_reach_every_ddl_and_keys_never_collide(services, make_database):
    keys = set()
    for source_index, server in enumerate(services.sources):
        db = make_database(server)
        with connect(server, autocommit=False) as conn:
            w3 = W3(db, source_index, steps_between_ddls=10)
            w3.create(conn)
            for _ in range(80):
                w3.step(conn)
            w3.finish_ddls(conn)
            assert w3.ddls_done == [len(W3_DDLS)] * 4
            for name in w3.names():
                with conn.cursor() as cur:
                    cur.execute(f"SELECT id FROM `{db}`.{name}")
                    ids = {r[0] for r in cur.fetchall()}
                    cur.execute(f"SHOW COLUMNS FROM `{db}`.{name}")
                    cols = {r[0]: r[1] for r in cur.fetchall()}
                assert not ids & keys
                keys |= ids
                assert cols["amount"] == "decimal(14,2)"
                assert {"note", "priority"} <= cols.keys()
    assert len(keys) > 100


def test_bulk_steps_insert_update_and_delete_the_rows_they_count(services, make_database):
    db = make_database(services.sources[0])
    with connect(services.sources[0], autocommit=False) as conn:
        bulk = Bulk(db, rows_per_txn=20)
        bulk.create(conn)
        changed = [bulk.step(conn) for _ in range(12)]
        # 20 inserted a step; from the 6th, 10 updated; from the 11th, 2 deleted
        assert changed == [20] * 5 + [30] * 5 + [32] * 2
        assert count(conn, f"SELECT COUNT(*) FROM `{db}`.bulk") == 12 * 20 - 2 * 2
        assert count(conn, f"SELECT COUNT(*) FROM `{db}`.bulk WHERE v <> id % 1000") == 7 * 10
        assert count(conn, f"SELECT MAX(id) FROM `{db}`.bulk") == 240
