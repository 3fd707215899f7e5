"""`rowbus verify`: are the sink's tables equal to the upstream tables that feed them?

Upstream tables are discovered on every configured source (user schemas only; a source with its
own ``include_schemas`` only in those, as its reader reads them), routed to target
tables (identity unless a route says otherwise; several shards may route to one target), and each
target is compared with the union of its shards by chunked checksums (see `compare`), or row
by row with an Iceberg current-state table when ``apply.sink_kind`` is ``iceberg`` (`iceberg`).

- `compare`: one target table against the union of the upstream tables that feed it;
- `checksum`: chunked checksums of a table by primary-key range, computed in the database;
- `iceberg`: one Iceberg current-state table against its upstream tables, row by row.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import pymysql

from rowbus.clients import mysql
from rowbus.clients.mysql import SYSTEM_SCHEMAS
from rowbus.config import MySQLSettings, Settings
from rowbus.exceptions import ConfigError, VerifyError
from rowbus.routing.exceptions import RoutingError
from rowbus.routing.routes import Router, RouteSettings
from rowbus.verify.checksum import TableRef
from rowbus.verify.compare import TableDiff, compare_table


def parse_route(text: str) -> RouteSettings:
    """``[SOURCE/]UPSTREAM_GLOB=TARGET`` (the command line's form of an apply route)."""
    pattern, sep, target = text.partition("=")
    try:
        if not sep:
            raise ValueError("no '='")
        return RouteSettings(match=pattern.strip(), target=target.strip())
    except ValueError:
        raise ConfigError(
            f"route {text!r}: expected [SOURCE/]UPSTREAM_GLOB=TARGET, "
            "e.g. 'shop_*.orders_*=shop.orders' or 'source1/shop.*={schema}_1.{table}'"
        ) from None


def verify(
    settings: Settings,
    routes: Sequence[RouteSettings] | None = None,
    schemas: Sequence[str] = ("*",),
    chunk_rows: int = 10_000,
) -> list[TableDiff]:
    """Compare every routed target table with its shards; one `TableDiff` per target.

    Routing is the apply job's own (`rowbus.routing.routes.Router`): without explicit
    `routes` the job's routes and its ``unrouted`` policy are used, so verify checks what the
    job was told to build, renamed and filtered columns included.
    """
    if routes is None:
        router = Router(settings.apply.routes, settings.apply.unrouted)
    else:
        router = Router(routes, "identity")
    with contextlib.ExitStack() as stack:
        upstream: dict[tuple[str, str], list[TableRef]] = defaultdict(list)
        for source in settings.sources:
            conn = stack.enter_context(_connect(source, source.name))
            for schema, table in _tables(conn, schemas):
                if source.include_schemas and not any(
                    fnmatch.fnmatchcase(schema, glob) for glob in source.include_schemas
                ):
                    continue  # another source's schema on a shared server: not read by this one
                try:
                    rule = router.rule(schema, table, source.name)
                    target = router.target(schema, table, source.name)
                except RoutingError as exc:
                    raise VerifyError(f"{source.name}/{schema}.{table}: {exc}") from exc
                if rule is None or target is None:
                    continue
                names = {new: old for old, new in rule.rename.items()}
                upstream[target.schema, target.table].append(
                    TableRef(source.name, conn, schema, table, names)
                )
        if not upstream:
            raise VerifyError(f"no tables match schemas {list(schemas)} on any source")
        if settings.apply.sink_kind == "iceberg":
            return _compare_iceberg(settings, upstream)
        sink = stack.enter_context(_connect(settings.resolved_sink, "sink"))
        return [
            compare_table(TableRef("sink", sink, schema, table), shards, chunk_rows)
            for (schema, table), shards in sorted(upstream.items())
        ]


def _compare_iceberg(
    settings: Settings, upstream: dict[tuple[str, str], list[TableRef]]
) -> list[TableDiff]:
    """Each target against its Iceberg current-state table (`rowbus.verify.iceberg`)."""
    from pyiceberg.exceptions import NoSuchTableError

    from rowbus.spark_apply.iceberg_catalog import open_catalog
    from rowbus.verify.iceberg import compare_iceberg

    iceberg = settings.apply.iceberg
    catalog = open_catalog(iceberg)
    diffs = []
    for (schema, table), shards in sorted(upstream.items()):
        ident = (iceberg.namespace or schema, table)
        try:
            loaded = catalog.load_table(ident)
        except NoSuchTableError:
            loaded = None
        diffs.append(compare_iceberg(".".join(ident), loaded, shards))
    return diffs


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


__all__ = ["TableDiff", "parse_route", "verify"]
