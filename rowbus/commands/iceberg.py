"""`rowbus iceberg maintain`: compact, expire and clean the Iceberg sink's tables while the job
runs (the catalog of ``apply.iceberg``; spark_apply README "Iceberg maintenance")."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from pydantic import ValidationError

from rowbus.config import Settings
from rowbus.exceptions import ConfigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "iceberg",
        help="operate the Iceberg sink's tables (apply.sink_kind: iceberg)",
        description="The Iceberg sink's tables in the catalog of apply.iceberg.catalog.",
    )
    actions = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    maintain = actions.add_parser(
        "maintain",
        help="compact tables (a change log's events once each, in commit order), expire old "
        "snapshots (the newest batches' commits "
        "stay, so exactly once holds), delete orphan files; safe while the job runs",
    )
    maintain.add_argument(
        "--table",
        action="append",
        default=None,
        metavar="NAMESPACE.TABLE",
        help="only this table (repeatable; default: every table a rowbus job wrote)",
    )
    maintain.add_argument(
        "--compact-min-files",
        type=int,
        default=None,
        help="compact a table with at least this many data files "
        "(default: apply.iceberg.maintenance.compact_min_files)",
    )
    maintain.add_argument(
        "--keep-batches",
        type=int,
        default=None,
        help="keep each job's newest this many batches' snapshots and all after them "
        "(default: apply.iceberg.maintenance.keep_batches)",
    )
    maintain.add_argument(
        "--orphan-age",
        type=float,
        default=None,
        metavar="SECONDS",
        help="delete unreferenced files older than this "
        "(default: apply.iceberg.maintenance.orphan_age_s)",
    )
    maintain.add_argument("--json", action="store_true", help="one JSON object per table")
    maintain.set_defaults(func=_maintain)


def _maintain(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.spark_apply.iceberg_catalog import open_catalog
    from rowbus.spark_apply.iceberg_maintenance import Maintenance
    from rowbus.spark_apply.settings import IcebergMaintenanceSettings

    iceberg = settings.apply.iceberg
    given = {
        "compact_min_files": ("--compact-min-files", args.compact_min_files),
        "keep_batches": ("--keep-batches", args.keep_batches),
        "orphan_age_s": ("--orphan-age", args.orphan_age),
    }
    overrides = {k: v for k, (_, v) in given.items() if v is not None}
    try:
        options = IcebergMaintenanceSettings.model_validate(
            {**iceberg.maintenance.model_dump(), **overrides}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        option, value = given[str(first["loc"][0])]
        raise ConfigError(f"{option} {value}: {first['msg'].lower()}") from None
    tables = None
    if args.table:
        tables = []
        for name in args.table:
            space, dot, table = name.rpartition(".")
            if not dot or not space or not table:
                raise ConfigError(f"--table {name!r}: expected NAMESPACE.TABLE, e.g. shop.orders")
            tables.append((space, table))
    reports = Maintenance(open_catalog(iceberg), options).run(tables)
    for report in reports:
        if args.json:
            print(json.dumps(asdict(report)))
            continue
        compacted = (
            f"{report.compacted[0]} -> {report.compacted[1]} data files"
            if report.compacted
            else "not compacted"
        )
        orphans = "not local" if report.orphans is None else f"{report.orphans} orphan file(s)"
        print(
            f"{report.table}: {compacted}; {report.expired} snapshot(s) expired; {orphans} removed"
        )
    if not args.json:
        print(f"iceberg maintain: {len(reports)} table(s)")
    return 0
