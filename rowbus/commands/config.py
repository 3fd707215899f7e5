"""`rowbus config show`."""

from __future__ import annotations

import argparse

import yaml

from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="configuration")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "show", help="print the effective configuration (file + environment; secrets masked)"
    ).set_defaults(func=_show)


def _show(args: argparse.Namespace, settings: Settings) -> int:
    print(yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False), end="")
    return 0
