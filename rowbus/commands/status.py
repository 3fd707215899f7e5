"""`rowbus status`."""

from __future__ import annotations

import argparse
import sys

from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser(
        "status",
        help="readers (leader, position, watermark and lag), the apply job's checkpoint and the "
        "open shard-DDL locks, on one screen (exit 3 if a part cannot be read)",
    ).set_defaults(func=_status)


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.status import print_status

    return print_status(settings, sys.stdout)
