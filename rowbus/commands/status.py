"""`rowbus status`."""

from __future__ import annotations

import argparse
import sys

from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = sub.add_parser(
        "status",
        help="readers (leader, position, watermark and lag), every apply job's last batch and the "
        "open shard-DDL locks of the configured control topic, on one screen (exit 3 if a part "
        "cannot be read)",
    )
    cmd.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    cmd.set_defaults(func=_status)


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.status import print_status

    return print_status(settings, sys.stdout, as_json_lines=args.json)
