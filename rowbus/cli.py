"""The `rowbus` command line. Only this module configures logging."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from protocol.errors import RowbusError
from rowbus import __version__
from rowbus.config import Settings, load_settings

Command = Callable[[argparse.Namespace, Settings], int]


def _local_up(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.local.stack import LocalStack

    stack = LocalStack(settings)
    report = stack.up()
    if report.installed:
        print(f"installed: {', '.join(report.installed)}")
    if not report.started:
        print(f"already up: {', '.join(report.already_running)} (nothing to do)")
    else:
        print(f"started {', '.join(report.started)} in {report.seconds:.1f}s")
    _print_status(stack)
    return 0


def _local_down(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.local.stack import LocalStack

    stopped = LocalStack(settings).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _local_status(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.local.stack import LocalStack

    states = _print_status(LocalStack(settings))
    return 0 if all(s == "up" for s in states) else 3


def _print_status(stack: object) -> list[str]:
    from rowbus.local.stack import LocalStack

    assert isinstance(stack, LocalStack)
    rows = stack.status()
    print(f"{'service':<10} {'address':<16} {'pid':>8}  health")
    for row in rows:
        print(f"{row.name:<10} {row.address:<16} {row.pid or '-':>8}  {row.state}")
    return [row.state for row in rows]


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.doctor import run_doctor

    return run_doctor(settings, kafka_only=args.kafka_only, mysql_only=args.mysql_only)


def _config_show(args: argparse.Namespace, settings: Settings) -> int:
    import yaml

    data = settings.model_dump(mode="json")
    print(yaml.safe_dump(data, sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rowbus",
        description="Replicate MySQL/MariaDB changes through Kafka, in order and exactly once.",
    )
    parser.add_argument("--version", action="version", version=f"rowbus {__version__}")
    parser.add_argument(
        "-c",
        "--config",
        type=Path,
        default=None,
        help="YAML configuration file (default: $ROWBUS_CONFIG, else ./rowbus.yaml if present, "
        "else built-in defaults for the embedded local stack)",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    local = sub.add_parser(
        "local", help="the embedded stack: 2 source MariaDBs, sink, ZooKeeper, broker"
    )
    local_sub = local.add_subparsers(dest="action", required=True, metavar="ACTION")
    local_sub.add_parser(
        "up", help="install what is missing, start every service not running, wait until ready"
    ).set_defaults(func=_local_up)
    local_sub.add_parser("down", help="stop exactly the processes `up` recorded").set_defaults(
        func=_local_down
    )
    local_sub.add_parser(
        "status", help="each service's address, pid and health (exit 3 if any is not up)"
    ).set_defaults(func=_local_status)

    doctor = sub.add_parser(
        "doctor",
        help="probe the broker and MySQL servers; say which guarantees hold (exit 1 if one the "
        "platform relies on does not)",
    )
    only = doctor.add_mutually_exclusive_group()
    only.add_argument("--kafka-only", action="store_true", help="probe only the broker")
    only.add_argument("--mysql-only", action="store_true", help="probe only the source servers")
    doctor.set_defaults(func=_doctor)

    config = sub.add_parser("config", help="configuration")
    config_sub = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    config_sub.add_parser(
        "show", help="print the effective configuration (file + environment; secrets masked)"
    ).set_defaults(func=_config_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
        func: Command = args.func
        return func(args, settings)
    except RowbusError as exc:
        print(f"rowbus: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
