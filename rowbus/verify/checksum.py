"""Chunked checksums of a table by primary-key range, computed inside the database.

A chunk is a half-open key range ``[lo, hi)`` (either end may be open). Its checksum is the row
count and the BIT_XOR of a 64-bit hash (MD5's first half) over every compared column, NULLs made
distinct from any value.
XOR is associative, so the checksum of a union of shards is the XOR of the shards' checksums:
merged shards are compared against their union without moving rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

from rowbus.clients.mysql import quote

Key = tuple[Any, ...]


@dataclass(frozen=True)
class TableRef:
    """One physical table on one server; `server` names it in reports (``source1``, ``sink``).
    `names` maps a compared (target) column name to this table's own, where a route renames."""

    server: str
    conn: pymysql.connections.Connection[Any]
    schema: str
    table: str
    names: Mapping[str, str] = field(default_factory=dict)

    def physical(self, cols: Sequence[str]) -> list[str]:
        """This table's names for the compared columns `cols`."""
        return [self.names.get(c, c) for c in cols]

    def __str__(self) -> str:
        return f"{self.server}:{self.schema}.{self.table}"

    @property
    def quoted(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"


@dataclass(frozen=True)
class Chunk:
    lo: Key | None
    hi: Key | None

    def where(self, key: Sequence[str]) -> tuple[str, list[Any]]:
        cols = "(" + ", ".join(quote(k) for k in key) + ")"
        marks = "(" + ", ".join(["%s"] * len(key)) + ")"
        clauses, args = [], []
        if self.lo is not None:
            clauses.append(f"{cols} >= {marks}")
            args += list(self.lo)
        if self.hi is not None:
            clauses.append(f"{cols} < {marks}")
            args += list(self.hi)
        return (" AND ".join(clauses) or "1=1"), args


def _names(ref: TableRef, sql: str) -> list[str]:
    """The names `sql` (a query on `ref`'s schema and table) returns, in its order."""
    with ref.conn.cursor() as cur:
        cur.execute(sql, (ref.schema, ref.table))
        return [str(row[0]) for row in cur.fetchall()]


def primary_key(ref: TableRef) -> list[str]:
    return _names(
        ref,
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA=%s "
        "AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' ORDER BY ORDINAL_POSITION",
    )


def columns(ref: TableRef) -> list[str]:
    return _names(
        ref,
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
        "AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
    )


def _text_columns(ref: TableRef) -> set[str]:
    return set(
        _names(
            ref,
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND CHARACTER_SET_NAME IS NOT NULL",
        )
    )


def boundaries(ref: TableRef, key: Sequence[str], chunk_rows: int) -> list[Chunk]:
    """Split `ref`'s key space into chunks of about `chunk_rows` of its rows."""
    cols = ", ".join(quote(k) for k in key)
    cuts: list[Key] = []
    last: Key | None = None
    with ref.conn.cursor() as cur:
        while True:
            where, args = Chunk(last, None).where(key) if last is not None else ("1=1", [])
            if last is not None:
                # Strictly after the previous cut.
                where = where.replace(">=", ">", 1)
            cur.execute(
                f"SELECT {cols} FROM {ref.quoted} WHERE {where} ORDER BY {cols} "
                f"LIMIT 1 OFFSET {int(chunk_rows)}",
                args,
            )
            row = cur.fetchone()
            if row is None:
                break
            last = tuple(row)
            cuts.append(last)
    edges: list[Key | None] = [None, *cuts, None]
    return [Chunk(lo, hi) for lo, hi in itertools.pairwise(edges)]


def checksum(
    ref: TableRef, key: Sequence[str], cols: Sequence[str], chunk: Chunk, combine: str = "BIT_XOR"
) -> tuple[int, int]:
    """(row count, xor of row CRCs) of `chunk` in `ref`; `combine` "SUM" for a table without a
    primary key, whose equal rows would cancel out in a xor."""
    own = ref.physical(cols)
    texts = _text_columns(ref)
    # Text in one character set: CONCAT_WS refuses to mix, say, gbk with big5, and a sink
    # column in another character set than the source's still compares by characters.
    values = [f"CONVERT({quote(c)} USING utf8mb4)" if c in texts else quote(c) for c in own]
    nulls = "CONCAT(" + ", ".join(f"ISNULL({quote(c)})" for c in own) + ")"
    row_text = "CONCAT_WS('\\x1f', " + ", ".join(values) + f", {nulls})"
    # 64 bits of MD5, not CRC32: CRC32 is affine over GF(2), so under BIT_XOR the same change
    # to an even number of rows of one length cancelled out (two rows given the same wrong
    # value read as equal); MD5's bits have no such structure.
    row_hash = f"CAST(CONV(LEFT(MD5({row_text}), 16), 16, 10) AS UNSIGNED)"
    where, args = chunk.where(ref.physical(key))
    with ref.conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*), COALESCE({combine}({row_hash}), 0) FROM {ref.quoted} WHERE {where}",
            args,
        )
        row = cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def rows(ref: TableRef, key: Sequence[str], cols: Sequence[str], chunk: Chunk) -> dict[Key, Key]:
    """Every row of `chunk` in `ref`, as {primary key: all compared values}."""
    where, args = chunk.where(ref.physical(key))
    positions = [list(cols).index(k) for k in key]
    with ref.conn.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(quote(c) for c in ref.physical(cols))} FROM {ref.quoted} "
            f"WHERE {where}",
            args,
        )
        return {tuple(r[i] for i in positions): tuple(r) for r in cur.fetchall()}


def all_rows(ref: TableRef, cols: Sequence[str]) -> list[Key]:
    """Every row of `ref` (a table without a primary key), its compared values in order."""
    with ref.conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(quote(c) for c in ref.physical(cols))} FROM {ref.quoted}")
        return [tuple(r) for r in cur.fetchall()]
