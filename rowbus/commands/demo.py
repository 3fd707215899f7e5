"""`rowbus demo`."""

from __future__ import annotations

import argparse

from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "demo",
        help="the whole platform on the embedded stack: W2, a bulk table + a W3 shard group "
        "with DDLs on both sources, a reader per source, the Spark apply job, then verify and "
        "a summary (exit 1 unless verify finds 0 differences)",
    )
    cmd.add_argument("--seconds", type=float, default=45.0, help="how long the writers run")
    cmd.add_argument(
        "--w2-rate", type=float, default=300.0, help="W2 transactions per second per source"
    )
    cmd.add_argument(
        "--w3-rate", type=float, default=60.0, help="W3 transactions per second per source"
    )
    cmd.add_argument(
        "--bulk-rate",
        type=float,
        default=12_000.0,
        help="row changes per second in a bulk table on the second source (0: none)",
    )
    cmd.add_argument(
        "--catch-up-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the sink to equal the sources",
    )
    cmd.add_argument(
        "--no-iceberg",
        action="store_true",
        help="skip the Iceberg part (a second, available-now apply job writing two of the first "
        "source's W2 tables into Iceberg, verified and queried)",
    )
    cmd.set_defaults(func=_demo)


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.demo import DemoOptions, run_demo

    return run_demo(
        settings,
        DemoOptions(
            seconds=args.seconds,
            w2_rate=args.w2_rate,
            w3_rate=args.w3_rate,
            bulk_rate=args.bulk_rate,
            catch_up_timeout=args.catch_up_timeout,
            iceberg=not args.no_iceberg,
        ),
    )
