"""`rowbus config show` and `rowbus config reference`."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from rowbus.clients import kafka
from rowbus.config import Settings, leaves, origins
from rowbus.reference import reference


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="configuration")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="print the effective configuration, each value with where it came from (the file, "
        "a ROWBUS_* environment variable, the embedded stack or the default); secrets masked",
    )
    show.add_argument("--yaml", action="store_true", help="plain YAML, without origins")
    show.set_defaults(func=_show)
    ref = actions.add_parser(
        "reference",
        help="print the reference of every setting (docs/configuration.md): path, type, "
        "default, what it does",
    )
    ref.set_defaults(func=_reference)


def _reference(args: argparse.Namespace, settings: Settings) -> int:
    del args, settings  # the reference is the models', not this configuration's
    print(reference(), end="")
    return 0


def shown(settings: Settings) -> dict[str, Any]:
    """The settings as `config show` prints them: passwords (`SecretStr`) and the secrets among
    the librdkafka settings (``kafka.client``, ``reader.kafka``: ``sasl.password`` …) masked."""
    data = settings.model_dump(mode="json")
    data["kafka"]["client"] = kafka.redacted(data["kafka"]["client"])
    data["reader"]["kafka"] = kafka.redacted(data["reader"]["kafka"])
    return data


def _show(args: argparse.Namespace, settings: Settings) -> int:
    if args.yaml:
        print(yaml.safe_dump(shown(settings), sort_keys=False), end="")
        return 0
    where = origins(settings, args.config)
    values = leaves(shown(settings))
    width = max(len(f"{k}: {json.dumps(v)}") for k, v in values.items())
    for key, value in values.items():
        line = f"{key}: {json.dumps(value)}"
        print(f"{line:<{width}}  # {where[key]}")
    return 0
