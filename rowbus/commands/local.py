"""`rowbus local up | down | status`."""

from __future__ import annotations

import argparse

from rowbus.config import Settings
from rowbus.local.stack import LocalStack


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    local = sub.add_parser(
        "local", help="the embedded stack: 2 source MariaDBs, a sink MariaDB, ZooKeeper, a broker"
    )
    actions = local.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "up", help="install what is missing, start every service not running, wait until ready"
    ).set_defaults(func=_up)
    actions.add_parser(
        "down", help="stop exactly the processes `up` recorded; returns once they are gone"
    ).set_defaults(func=_down)
    actions.add_parser(
        "status", help="each service's address, pid and health (exit 3 if any is not up)"
    ).set_defaults(func=_status)


def _up(args: argparse.Namespace, settings: Settings) -> int:
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


def _down(args: argparse.Namespace, settings: Settings) -> int:
    stopped = LocalStack(settings).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _status(args: argparse.Namespace, settings: Settings) -> int:
    states = _print_status(LocalStack(settings))
    return 0 if all(s == "up" for s in states) else 3


def _print_status(stack: LocalStack) -> list[str]:
    rows = stack.status()
    print(f"{'service':<10} {'address':<16} {'pid':>8}  health")
    for row in rows:
        print(f"{row.name:<10} {row.address:<16} {row.pid or '-':>8}  {row.state}")
    return [row.state for row in rows]
