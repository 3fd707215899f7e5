"""Every transaction shape the binlog can hold, written on a real source (see PROTOCOL.md
"Transaction shapes" for what MariaDB writes for each), and the tables they touch.

`write_shapes` runs them in order and ends with one marker transaction: a consumer that
delivers the marker has passed every shape before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from rowbus.config import MySQLSettings
from tests.conftest import connect

MARKER = "marker-txn-shapes"

TABLES = {
    "a": "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB",
    "m": "CREATE TABLE m (id INT PRIMARY KEY, v INT) ENGINE=MyISAM",
    "k": "CREATE TABLE k (x INT, y VARCHAR(10) NULL) ENGINE=InnoDB",
    "u": (
        "CREATE TABLE u (id INT PRIMARY KEY, u1 INT NULL, u2 INT NULL, v INT NULL, "
        "UNIQUE KEY uk1 (u1), UNIQUE KEY uk2 (u2, v)) ENGINE=InnoDB"
    ),
    "p": "CREATE TABLE p (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB",
}
BIG = 2_000
"""Rows of the big transaction (`p`): one transaction, several statements over every row."""
OTHER_TABLES = {"b": "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB"}
# created by a shape (CREATE TABLE … SELECT), compared too
CREATED = ("c",)


def write_shapes(server: MySQLSettings, db: str, other: str, filtered: str) -> None:
    """Tables first (their DDL flows too), then one transaction per shape, then the marker."""
    with connect(server, db) as conn, conn.cursor() as cur:
        for ddl in TABLES.values():
            cur.execute(ddl)
        cur.execute(f"USE `{other}`")
        for ddl in OTHER_TABLES.values():
            cur.execute(ddl)
        cur.execute(f"CREATE TABLE `{filtered}`.f (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute(f"USE `{db}`")
        cur.execute("INSERT INTO m VALUES (1, 1), (2, 2)")  # MyISAM, autocommit
        cur.execute("INSERT INTO u VALUES (1, 1, 1, 1), (2, 2, 2, 2)")
    with connect(server, db, autocommit=False) as conn, conn.cursor() as cur:
        run: Callable[..., Any] = cur.execute

        # savepoint released (Django's nested atomic() that succeeds)
        run("INSERT INTO a VALUES (1, 'one')")
        run("SAVEPOINT s1")
        run("INSERT INTO a VALUES (2, 'two')")
        run("RELEASE SAVEPOINT s1")
        conn.commit()
        # savepoint rolled back, transactional tables only (the server cuts its cache)
        run("INSERT INTO a VALUES (3, 'three')")
        run("SAVEPOINT s2")
        run("INSERT INTO a VALUES (4, 'rolled back')")
        run("ROLLBACK TO SAVEPOINT s2")
        run("INSERT INTO a VALUES (5, 'five')")
        conn.commit()
        # savepoint rolled back after a statement touching MyISAM and InnoDB: the InnoDB rows
        # stay in the binlog before ROLLBACK TO, the MyISAM rows are a group of their own
        run("INSERT INTO a VALUES (6, 'six')")
        run("SAVEPOINT s3")
        run("UPDATE a JOIN m ON a.id = m.id SET a.v = 'joined', m.v = m.v + 10")
        run("ROLLBACK TO s3")
        conn.commit()
        # nested savepoints (Rails requires_new inside requires_new)
        run("INSERT INTO a VALUES (7, 'seven')")
        run("SAVEPOINT outer_sp")
        run("INSERT INTO a VALUES (8, 'eight')")
        run("SAVEPOINT inner_sp")
        run("UPDATE a SET v = 'gone' WHERE id = 7")
        run("ROLLBACK TO SAVEPOINT inner_sp")
        run("RELEASE SAVEPOINT outer_sp")
        conn.commit()
        # a savepoint whose whole transaction is rolled back
        run("INSERT INTO a VALUES (9, 'rolled back')")
        run("SAVEPOINT s4")
        conn.rollback()
        # non-transactional table alone, and a statement touching MyISAM and InnoDB
        run("INSERT INTO m VALUES (3, 3)")
        conn.commit()
        run("UPDATE a JOIN m ON a.id = m.id SET a.v = CONCAT(a.v, '+'), m.v = m.v + 100")
        conn.commit()
        # rolled back with MyISAM writes: the MyISAM rows reach the binlog (and stay)
        run("INSERT INTO a VALUES (30, 'rolled back')")
        run("INSERT INTO m VALUES (30, 30)")
        conn.rollback()
        # tables of two schemas in one transaction
        run("INSERT INTO a VALUES (40, 'forty')")
        run(f"INSERT INTO `{other}`.b VALUES (40, 'forty')")
        run("UPDATE a SET v = 'one!' WHERE id = 1")
        conn.commit()
        # empty transactions, and one whose rows are all filtered out
        conn.commit()
        run("SELECT COUNT(*) FROM a")
        conn.commit()
        run("UPDATE a SET v = v WHERE id = 1")
        conn.commit()
        run(f"INSERT INTO `{filtered}`.f VALUES (1)")
        conn.commit()
        # CREATE TABLE … SELECT: a DDL and rows in one group
        run("CREATE TABLE c ENGINE=InnoDB SELECT id, v FROM a WHERE id < 4")
        conn.commit()
        # a table without a primary key: duplicates and NULLs
        run("INSERT INTO k VALUES (1, 'a'), (1, 'a'), (2, NULL), (3, 'c')")
        conn.commit()
        run("UPDATE k SET y = 'b' WHERE x = 2")
        run("DELETE FROM k WHERE x = 1 LIMIT 1")
        run("UPDATE k SET x = 4 WHERE x = 3")
        conn.commit()
        run("INSERT INTO k VALUES (5, NULL), (5, NULL)")
        run("UPDATE k SET y = 'z' WHERE x = 5 LIMIT 1")
        conn.commit()
        # unique values swapped within a transaction, then moved to a new row
        run("UPDATE u SET u1 = NULL WHERE id = 1")
        run("UPDATE u SET u1 = 1 WHERE id = 2")
        run("UPDATE u SET u1 = 2 WHERE id = 1")
        conn.commit()
        run("UPDATE u SET u1 = NULL, u2 = 9 WHERE id = 1")
        run("INSERT INTO u VALUES (3, 2, 1, 1)")
        conn.commit()
        # primary keys moved, swapped through a free key, deleted and re-inserted, and a key
        # inserted, updated and deleted: each in one transaction
        run("INSERT INTO p VALUES (1, 1), (2, 2), (3, 3), (4, 4)")
        conn.commit()
        run("UPDATE p SET id = 10 WHERE id = 1")
        run("UPDATE p SET id = 1 WHERE id = 2")
        run("UPDATE p SET id = 2 WHERE id = 10")
        run("UPDATE p SET id = id + 100 WHERE id = 4")
        conn.commit()
        run("DELETE FROM p WHERE id = 3")
        run("INSERT INTO p VALUES (3, 33)")
        run("INSERT INTO p VALUES (5, 5)")
        run("UPDATE p SET v = 55 WHERE id = 5")
        run("DELETE FROM p WHERE id = 5")
        conn.commit()
        # a big transaction: many rows inserted, updated and half of them deleted
        run(f"INSERT INTO p SELECT 1000 + seq, seq FROM seq_1_to_{BIG}")
        run("UPDATE p SET v = v * 2 WHERE id > 1000")
        run("DELETE FROM p WHERE id > 1000 AND id % 2 = 0")
        conn.commit()
    _xa_shapes(server, db)
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (999, %s)", (MARKER,))


def _xa_shapes(server: MySQLSettings, db: str) -> None:
    with connect(server, db) as conn, conn.cursor() as cur:
        # two-phase, committed right away
        cur.execute("XA START 'x1'")
        cur.execute("INSERT INTO a VALUES (50, 'xa two-phase')")
        cur.execute("XA END 'x1'")
        cur.execute("XA PREPARE 'x1'")
        cur.execute("XA COMMIT 'x1'")
        # one phase
        cur.execute("XA START 'x2'")
        cur.execute("INSERT INTO a VALUES (51, 'xa one phase')")
        cur.execute("XA END 'x2'")
        cur.execute("XA COMMIT 'x2' ONE PHASE")
        # prepared, then rolled back
        cur.execute("XA START 'x3'")
        cur.execute("INSERT INTO a VALUES (52, 'xa rolled back')")
        cur.execute("XA END 'x3'")
        cur.execute("XA PREPARE 'x3'")
        cur.execute("XA ROLLBACK 'x3'")
        # prepared by a session that goes away; others commit; committed later elsewhere
        cur.execute("XA START 'x4'")
        cur.execute("INSERT INTO a VALUES (53, 'xa committed later')")
        cur.execute("UPDATE a SET v = 'xa touched' WHERE id = 5")
        cur.execute("XA END 'x4'")
        cur.execute("XA PREPARE 'x4'")
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO a VALUES (54, 'between prepare and commit')")
        cur.execute("XA COMMIT 'x4'")


def table_rows(server: MySQLSettings, db: str, table: str) -> Counter[tuple[Any, ...]]:
    """The table's rows as a multiset (a keyless table may hold equal rows)."""
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        return Counter(tuple(r) for r in cur.fetchall())


def compared_tables(db: str, other: str) -> list[tuple[str, str]]:
    return [(db, t) for t in (*TABLES, *CREATED)] + [(other, t) for t in OTHER_TABLES]
