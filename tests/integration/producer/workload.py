"""A deterministic write workload whose every change is known, for exactly-once tests."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

from rowbus.config import MySQLSettings
from rowbus.protocol.events import Op
from tests.conftest import connect


@dataclass
class Written:
    """What the workload committed: per GTID, the ordered (op, id, value) changes."""

    transactions: dict[str, list[tuple[Op, int, int | None]]] = field(default_factory=dict)


class Workload(threading.Thread):
    """Runs up to `count` transactions of 1-4 inserts/updates/deletes on table ``w``, paced,
    until `stop` is set (and at least `minimum` ran)."""

    def __init__(
        self,
        server: MySQLSettings,
        database: str,
        count: int,
        seed: int,
        pace_s: float,
        minimum: int = 0,
    ) -> None:
        super().__init__(name="workload", daemon=True)
        self.server = server
        self.database = database
        self.count = count
        self.rng = random.Random(seed)
        self.pace = pace_s
        self.minimum = minimum
        self.written = Written()
        self.error: BaseException | None = None
        self.stop = threading.Event()

    @staticmethod
    def create(server: MySQLSettings, database: str) -> None:
        with connect(server, database) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE w (id INT PRIMARY KEY, v INT NOT NULL, note VARCHAR(32))")

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        live: list[int] = []
        next_id = 1
        with connect(self.server, self.database, autocommit=False) as conn, conn.cursor() as cur:
            for n in range(self.count):
                if self.stop.is_set() and n >= self.minimum:
                    return
                changes: list[tuple[Op, int, int | None]] = []
                touched: set[int] = set()
                for _ in range(self.rng.randint(1, 4)):
                    roll = self.rng.random()
                    candidates = [i for i in live if i not in touched]
                    if roll < 0.5 or not candidates:
                        row_id, next_id = next_id, next_id + 1
                        value = self.rng.randint(0, 1_000_000)
                        cur.execute("INSERT INTO w VALUES (%s, %s, %s)", (row_id, value, f"n{n}"))
                        live.append(row_id)
                        changes.append((Op.INSERT, row_id, value))
                    elif roll < 0.8:
                        row_id = self.rng.choice(candidates)
                        value = self.rng.randint(0, 1_000_000)
                        cur.execute("UPDATE w SET v = %s WHERE id = %s", (value, row_id))
                        changes.append((Op.UPDATE, row_id, value))
                    else:
                        row_id = self.rng.choice(candidates)
                        cur.execute("DELETE FROM w WHERE id = %s", (row_id,))
                        live.remove(row_id)
                        changes.append((Op.DELETE, row_id, None))
                    touched.add(row_id)
                conn.commit()
                cur.execute("SELECT @@last_gtid")
                row = cur.fetchone()
                assert row is not None
                self.written.transactions[str(row[0])] = changes
                if self.pace and not self.stop.is_set():
                    self.stop.wait(self.pace)
