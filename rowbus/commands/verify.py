"""`rowbus verify`."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from rowbus.config import Settings
from rowbus.exceptions import ConfigError
from rowbus.routing.routes import RouteSettings
from rowbus.verify import TableDiff, parse_route, verify


def _route(text: str) -> RouteSettings:
    try:
        return parse_route(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "verify",
        help="compare the sink with the sources (chunked checksums by primary key, or row by "
        "row with Iceberg tables when apply.sink_kind is iceberg; merged shards against their "
        "union); exit 1 on any difference",
    )
    cmd.add_argument(
        "--route",
        action="append",
        default=None,
        metavar="[SOURCE/]GLOB=TARGET",
        type=_route,
        help="map upstream tables to a target, e.g. 'shop_*.orders_*=shop.orders' or "
        "'source1/shop.*={schema}_1.{table}' ({source}, {schema} and {table} may be used in "
        "TARGET); unrouted tables keep their names. "
        "Default: the routes of the apply section",
    )
    cmd.add_argument(
        "--schema",
        action="append",
        default=None,
        metavar="GLOB",
        help="compare only upstream schemas matching GLOB (repeatable; default: all user schemas)",
    )
    cmd.add_argument("--chunk-rows", type=int, default=10_000, help="rows per checksum chunk")
    cmd.add_argument("--json", action="store_true", help="one JSON object per target table")
    cmd.set_defaults(func=_verify)


def _verify(args: argparse.Namespace, settings: Settings) -> int:
    diffs = verify(settings, args.route, args.schema or ["*"], args.chunk_rows)
    for diff in diffs:
        if args.json:
            print(json.dumps(asdict(diff), default=str))
        else:
            _print(diff)
    bad = [d for d in diffs if not d.equal]
    total = sum(d.differences for d in diffs)
    if not args.json:
        verdict = "EQUAL" if not bad else "DIFFERENT"
        print(
            f"verify: {verdict}: {len(diffs)} table(s), {len(bad)} differing, "
            f"{total} differing key(s)"
        )
    return 1 if bad else 0


def _print(diff: TableDiff) -> None:
    shards = ", ".join(diff.shards)
    state = "equal" if diff.equal else "DIFFERENT"
    print(
        f"{diff.target} <- {shards}: {state}; rows upstream {diff.source_rows}, target "
        f"{diff.target_rows}; chunks {diff.chunks} ({diff.chunks_differing} differing)"
    )
    if diff.error:
        print(f"  {diff.error}")
    for label, keys in (
        ("missing in target", diff.missing),
        ("extra in target", diff.extra),
        ("different", diff.different),
        ("in several shards", diff.duplicated),
    ):
        if keys:
            shown = ", ".join(repr(k if len(k) > 1 else k[0]) for k in keys)
            print(f"  {label}: {shown}")
