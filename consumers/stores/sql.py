"""A checkpoint in a SQL table, written inside the user's own database transaction."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

from rowbus.consumers.stores.base import CheckpointStore, Guarantee
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.exceptions import CheckpointError

_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")


class SqlCheckpointStore(CheckpointStore):
    """The checkpoint in row `name` of `table` (MySQL/MariaDB, created if missing).

    Exactly once when the handler writes it with `save_in(connection, checkpoint)` in the same
    database transaction as the rows it applies: `save_in` locks the row, refuses a checkpoint
    behind the stored one (a replayed transaction then fails loudly instead of applying
    twice), and writes it; the user's commit makes both durable together. `save` alone (its own
    autocommitted write) is at least once. `connect` returns a DB-API connection (pymysql).
    """

    guarantee: ClassVar[Guarantee] = Guarantee.EXACTLY_ONCE

    def __init__(
        self, connect: Callable[[], Any], *, name: str, table: str = "rowbus_checkpoints"
    ) -> None:
        super().__init__()
        if not _NAME.match(table):
            raise ValueError(f"table name {table!r} must match {_NAME.pattern}")
        self._connect = connect
        self._conn: Any = None
        self.name = name
        self.table = table

    def open(self) -> None:
        try:
            self._conn = self._connect()
            with self._conn.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS `{self.table}` (name VARCHAR(190) PRIMARY KEY, "
                    "checkpoint LONGTEXT NOT NULL, ts BIGINT NOT NULL, "
                    "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
                    "ON UPDATE CURRENT_TIMESTAMP(6))"
                )
            self._conn.commit()
        except Exception as exc:
            raise CheckpointError(f"cannot open checkpoint table {self.table}: {exc}") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _db(self) -> Any:
        if self._conn is None:
            raise CheckpointError("the SQL checkpoint store is not open")
        return self._conn

    def _load(self) -> Checkpoint | None:
        conn = self._db()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT checkpoint FROM `{self.table}` WHERE name = %s", (self.name,))
                row = cur.fetchone()
            conn.commit()
        except Exception as exc:
            raise CheckpointError(f"cannot read checkpoint {self.name}: {exc}") from exc
        return Checkpoint.from_json(row[0]) if row else None

    def _save(self, checkpoint: Checkpoint) -> None:
        conn = self._db()
        try:
            self.save_in(conn, checkpoint)
            conn.commit()
        except CheckpointError:
            conn.rollback()
            raise
        except Exception as exc:
            conn.rollback()
            raise CheckpointError(f"cannot write checkpoint {self.name}: {exc}") from exc

    def save_in(self, connection: Any, checkpoint: Checkpoint) -> None:
        """Write `checkpoint` in `connection`'s open transaction (the caller commits).

        CheckpointError if the stored checkpoint is ahead of it: this transaction was applied
        already, so the caller must roll back.
        """
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT checkpoint FROM `{self.table}` WHERE name = %s FOR UPDATE", (self.name,)
            )
            row = cur.fetchone()
            if row:
                checkpoint.check_follows(Checkpoint.from_json(row[0]))
            cur.execute(
                f"INSERT INTO `{self.table}` (name, checkpoint, ts) VALUES (%s, %s, %s) "
                "ON DUPLICATE KEY UPDATE checkpoint = VALUES(checkpoint), ts = VALUES(ts)",
                (self.name, checkpoint.to_json(), checkpoint.ts),
            )
        self._last = checkpoint
