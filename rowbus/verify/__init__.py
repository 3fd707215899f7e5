"""`rowbus verify`: are the sink's tables equal to the upstream tables that feed them?

Upstream tables are discovered on every configured source (user schemas only), routed to target
tables (identity unless a route says otherwise; several shards may route to one target), and each
target is compared with the union of its shards by chunked checksums (see `compare`).
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from rowbus.clients import mysql
from rowbus.config import MySQLSettings, Settings
from rowbus.exceptions import ConfigError, VerifyError
from rowbus.verify.checksum import TableRef
from rowbus.verify.compare import TableDiff, compare_table

SYSTEM_SCHEMAS = {"mysql", "information_schema", "performance_schema", "sys"}


@dataclass(frozen=True)
class Route:
    """``schema.table`` glob on the upstream side → ``schema.table`` target, where the target
    may use ``{schema}`` and ``{table}`` of the matched upstream table."""

    pattern: str
    target: str

    @staticmethod
    def parse(text: str) -> Route:
        pattern, sep, target = text.partition("=")
        if not sep or "." not in pattern or "." not in target:
            raise ConfigError(
                f"route {text!r}: expected UPSTREAM_GLOB=TARGET, e.g. 'shop_*.orders_*=shop.orders'"
            )
        return Route(pattern.strip(), target.strip())

    def apply(self, schema: str, table: str) -> tuple[str, str] | None:
        if not fnmatch.fnmatchcase(f"{schema}.{table}", self.pattern):
            return None
        target = self.target.format(schema=schema, table=table)
        target_schema, _, target_table = target.partition(".")
        return target_schema, target_table


def route(routes: Sequence[Route], schema: str, table: str) -> tuple[str, str]:
    for candidate in routes:
        found = candidate.apply(schema, table)
        if found is not None:
            return found
    return schema, table


def apply_routes(settings: Settings) -> list[Route]:
    """The apply job's routes, so verify compares what the job was told to build."""
    return [Route(r.match, r.target) for r in settings.apply.routes]


def verify(
    settings: Settings,
    routes: Sequence[Route] | None = None,
    schemas: Sequence[str] = ("*",),
    chunk_rows: int = 10_000,
) -> list[TableDiff]:
    """Compare every routed target table with its shards; one `TableDiff` per target.

    Without explicit `routes`, the apply job's routes are used; tables the job skips
    (``apply.unrouted: skip``) are skipped here too.
    """
    skip_unrouted = routes is None and settings.apply.unrouted == "skip"
    routes = apply_routes(settings) if routes is None else list(routes)
    with contextlib.ExitStack() as stack:
        upstream: dict[tuple[str, str], list[TableRef]] = defaultdict(list)
        for source in settings.sources:
            conn = stack.enter_context(_connect(source, source.name))
            for schema, table in _tables(conn, schemas):
                if skip_unrouted and not any(r.apply(schema, table) for r in routes):
                    continue
                upstream[route(routes, schema, table)].append(
                    TableRef(source.name, conn, schema, table)
                )
        if not upstream:
            raise VerifyError(f"no tables match schemas {list(schemas)} on any source")
        sink = stack.enter_context(_connect(settings.resolved_sink, "sink"))
        return [
            compare_table(TableRef("sink", sink, schema, table), shards, chunk_rows)
            for (schema, table), shards in sorted(upstream.items())
        ]


def _tables(
    conn: pymysql.connections.Connection[Any], schemas: Sequence[str]
) -> Iterator[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE='BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
        )
        for schema, table in cur.fetchall():
            if schema in SYSTEM_SCHEMAS or schema.startswith("rowbus_"):
                continue
            if any(fnmatch.fnmatchcase(schema, glob) for glob in schemas):
                yield str(schema), str(table)


@contextlib.contextmanager
def _connect(server: MySQLSettings, name: str) -> Iterator[pymysql.connections.Connection[Any]]:
    try:
        conn = mysql.connect(
            server,
            connect_timeout=10,
            autocommit=True,
        )
    except pymysql.MySQLError as exc:
        raise VerifyError(f"cannot connect to {name} at {server.address}: {exc}") from exc
    with conn:
        # One consistent view per server for the whole comparison.
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        yield conn


__all__ = ["Route", "TableDiff", "apply_routes", "route", "verify"]
