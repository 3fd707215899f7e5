"""The reference workloads of the design (W1, W2, W3), deterministic from a seed.

Each workload creates its tables on an upstream server, then runs in steps; a step is one or more
upstream transactions and returns how many row changes it made. Workloads never read back what
they wrote: they keep their own key sets, so two runs with the same seed write the same changes.

- W1 insert-heavy: one 10-column table, 100-row transactions.
- W2 OLTP mix: 8 tables, single-row transactions, 60% update / 20% insert / 20% delete.
- W3 shard merge: 4 shard tables per source routed to one target; DDLs on every shard mid-stream.
- Bulk: row changes at volume written by the server itself (the demo's pipeline at speed).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pymysql

    Conn = pymysql.connections.Connection[Any]

W1_DDL = """CREATE TABLE IF NOT EXISTS {name} (
  id BIGINT PRIMARY KEY, i INT, b BIGINT, s VARCHAR(64), d DECIMAL(12,2), t DATETIME(6),
  f DOUBLE, y TINYINT, x TEXT, dt DATE)"""

W2_DDL = """CREATE TABLE IF NOT EXISTS {name} (
  id BIGINT PRIMARY KEY, qty INT NOT NULL, label VARCHAR(32), price DECIMAL(10,2),
  updated DATETIME(6))"""

W3_DDL = """CREATE TABLE IF NOT EXISTS {name} (
  id BIGINT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), status VARCHAR(16))"""

# Applied on every shard, in order, at different moments per shard.
W3_DDLS = (
    "ALTER TABLE {name} ADD COLUMN note VARCHAR(32) NOT NULL DEFAULT ''",
    "ALTER TABLE {name} MODIFY COLUMN amount DECIMAL(14,2)",
    "ALTER TABLE {name} ADD COLUMN priority INT NOT NULL DEFAULT 0",
)


def _q(schema: str, table: str) -> str:
    return f"`{schema}`.`{table}`"


def w1_row(rng: random.Random, key: int) -> tuple[Any, ...]:
    """One W1 row as the Python values a reader decodes (see protocol.values)."""
    return (
        key,
        rng.randint(-(2**31), 2**31 - 1),
        rng.randint(-(2**62), 2**62),
        f"name-{key}-{rng.randint(0, 10**9)}",
        Decimal(rng.randint(-(10**11), 10**11)) / 100,
        dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 10**14)),
        rng.random() * 1e6,
        rng.randint(-128, 127),
        "text " * rng.randint(0, 8),
        dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(0, 10_000)),
    )


@dataclass
class W1:
    """Insert-heavy: 100-row transactions into one 10-column table."""

    schema: str
    table: str = "w1"
    rows_per_txn: int = 100
    seed: int = 1
    next_key: int = 1
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def create(self, conn: Conn) -> None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.schema}`")
            cur.execute(W1_DDL.format(name=_q(self.schema, self.table)))

    def step(self, conn: Conn) -> int:
        rows = [w1_row(self.rng, self.next_key + i) for i in range(self.rows_per_txn)]
        self.next_key += self.rows_per_txn
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {_q(self.schema, self.table)} VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
        conn.commit()
        return len(rows)


@dataclass
class W2:
    """OLTP mix over 8 tables: single-row transactions, 60% update / 20% insert / 20% delete.

    `key_offset` keeps the keys of two sources apart when their tables merge into one target.
    """

    schema: str
    tables: int = 8
    seed: int = 2
    initial_rows: int = 200
    key_offset: int = 0
    rng: random.Random = field(init=False)
    keys: list[list[int]] = field(init=False)
    next_key: int = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.keys = [[] for _ in range(self.tables)]
        self.next_key = self.key_offset + 1

    def names(self) -> list[str]:
        return [f"t{i}" for i in range(self.tables)]

    def create(self, conn: Conn) -> None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.schema}`")
            for name in self.names():
                cur.execute(W2_DDL.format(name=_q(self.schema, name)))
        for index in range(self.tables):
            for _ in range(self.initial_rows // self.tables):
                self._insert(conn, index)

    def step(self, conn: Conn) -> int:
        index = self.rng.randrange(self.tables)
        roll = self.rng.random()
        if roll < 0.2 or not self.keys[index]:
            self._insert(conn, index)
        elif roll < 0.4:
            key = self.keys[index].pop(self.rng.randrange(len(self.keys[index])))
            self._run(conn, f"DELETE FROM {_q(self.schema, f't{index}')} WHERE id = %s", (key,))
        else:
            key = self.rng.choice(self.keys[index])
            self._run(
                conn,
                f"UPDATE {_q(self.schema, f't{index}')} SET qty = qty + 1, label = %s, "
                "price = %s, updated = %s WHERE id = %s",
                (f"u{self.rng.randint(0, 999)}", self._price(), self._time(), key),
            )
        return 1

    def _insert(self, conn: Conn, index: int) -> None:
        key = self.next_key
        self.next_key += 1
        self.keys[index].append(key)
        self._run(
            conn,
            f"INSERT INTO {_q(self.schema, f't{index}')} VALUES (%s, %s, %s, %s, %s)",
            (key, self.rng.randint(0, 1000), f"i{key}", self._price(), self._time()),
        )

    def _price(self) -> Decimal:
        return Decimal(self.rng.randint(0, 10**8)) / 100

    def _time(self) -> dt.datetime:
        return dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=self.rng.randint(0, 10**13))

    @staticmethod
    def _run(conn: Conn, sql: str, args: Sequence[Any]) -> None:
        with conn.cursor() as cur:
            cur.execute(sql, args)
        conn.commit()


BULK_DDL = """CREATE TABLE IF NOT EXISTS {name} (
  id BIGINT PRIMARY KEY, v INT NOT NULL, s VARCHAR(64), d DECIMAL(12,2), t DATETIME(6))"""


@dataclass
class Bulk:
    """Row changes at volume for little client CPU (a Python writer caps near 1k transactions
    a second): each step is one transaction that inserts `rows_per_txn` rows the server makes
    from MariaDB's sequence engine, updates half as many inserted five steps before and
    deletes a tenth as many inserted ten steps before — 1.6 row changes per inserted row, each
    a row event of its own in the binlog. MariaDB only (``seq_1_to_N``)."""

    schema: str
    table: str = "bulk"
    rows_per_txn: int = 500
    steps: int = field(default=0, init=False)

    def names(self) -> list[str]:
        return [self.table]

    def create(self, conn: Conn) -> None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.schema}`")
            cur.execute(BULK_DDL.format(name=_q(self.schema, self.table)))

    def step(self, conn: Conn) -> int:
        n, name = self.rows_per_txn, _q(self.schema, self.table)
        first = self.steps * n + 1
        self.steps += 1
        with conn.cursor() as cur:
            changed = cur.execute(
                f"INSERT INTO {name} SELECT seq, seq % 1000, CONCAT('row-', seq), seq / 100, "
                f"NOW(6) FROM `{self.schema}`.seq_{first}_to_{first + n - 1}"
            )
            updated = first - 5 * n
            if updated > 0:
                changed += cur.execute(
                    f"UPDATE {name} SET v = v + 1, s = CONCAT(s, '+'), t = NOW(6) "
                    "WHERE id BETWEEN %s AND %s",
                    (updated, updated + n // 2 - 1),
                )
            deleted = first - 10 * n
            if deleted > 0:
                changed += cur.execute(
                    f"DELETE FROM {name} WHERE id BETWEEN %s AND %s",
                    (deleted + n // 2, deleted + n // 2 + n // 10 - 1),
                )
        conn.commit()
        return int(changed)


@dataclass
class W3:
    """One source's half of a shard group: `shards` tables ``orders_<n>`` in `schema`.

    Keys are ``source_index + sources * (shard + shards * k)`` so no two shards anywhere in the
    group share a key. Each shard runs the next DDL of `W3_DDLS` on its own schedule (see
    `_maybe_ddl`), so the shards reach each DDL at different moments.
    """

    schema: str
    source_index: int
    sources: int = 2
    shards: int = 4
    seed: int = 3
    steps_between_ddls: int = 40
    rng: random.Random = field(init=False)
    counters: list[int] = field(init=False)
    ddls_done: list[int] = field(init=False)
    steps: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed + self.source_index)
        self.counters = [0] * self.shards
        self.ddls_done = [0] * self.shards

    def names(self) -> list[str]:
        return [f"orders_{n}" for n in range(self.shards)]

    def create(self, conn: Conn) -> None:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{self.schema}`")
            for name in self.names():
                cur.execute(W3_DDL.format(name=_q(self.schema, name)))

    def key(self, shard: int, k: int) -> int:
        return self.source_index + self.sources * (shard + self.shards * k)

    def step(self, conn: Conn) -> int:
        """One transaction on a random shard; every shard runs its DDLs on its own schedule."""
        self.steps += 1
        shard = self.rng.randrange(self.shards)
        self._maybe_ddl(conn, shard)
        table = _q(self.schema, f"orders_{shard}")
        k = self.counters[shard]
        with conn.cursor() as cur:
            if k and self.rng.random() < 0.3:
                cur.execute(
                    f"UPDATE {table} SET status = %s WHERE id = %s",
                    (
                        self.rng.choice(["paid", "shipped", "void"]),
                        self.key(shard, self.rng.randrange(k)),
                    ),
                )
            else:
                cur.execute(
                    f"INSERT INTO {table} (id, customer, amount, status) "
                    "VALUES (%s, %s, %s, 'new')",
                    (
                        self.key(shard, k),
                        self.rng.randint(1, 500),
                        Decimal(self.rng.randint(1, 99_999)) / 100,
                    ),
                )
                self.counters[shard] += 1
        conn.commit()
        return 1

    def finish_ddls(self, conn: Conn) -> None:
        """Bring every shard to the last DDL, so the group can complete its locks."""
        for shard in range(self.shards):
            while self.ddls_done[shard] < len(W3_DDLS):
                self._ddl(conn, shard)

    def _maybe_ddl(self, conn: Conn, shard: int) -> None:
        done = self.ddls_done[shard]
        # Shard n reaches DDL d after (d + 1) * steps_between_ddls + n * 5 steps.
        due = (done + 1) * self.steps_between_ddls + shard * 5 + self.source_index * 3
        if done < len(W3_DDLS) and self.steps >= due:
            self._ddl(conn, shard)

    def _ddl(self, conn: Conn, shard: int) -> None:
        statement = W3_DDLS[self.ddls_done[shard]]
        with conn.cursor() as cur:
            cur.execute(statement.format(name=_q(self.schema, f"orders_{shard}")))
        self.ddls_done[shard] += 1
