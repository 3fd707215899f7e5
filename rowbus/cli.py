"""The `rowbus` command line. Only this module configures logging."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rowbus import __version__
from rowbus.commands import COMMANDS
from rowbus.config import Settings, load_settings
from rowbus.protocol.errors import RowbusError

Command = Callable[[argparse.Namespace, Settings], int]
log = logging.getLogger("rowbus")


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
        "else built-in defaults for the embedded local stack); ROWBUS_SECTION__KEY environment "
        "variables override it",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A crash of a native part (librdkafka, the C extensions) then leaves every thread's Python
    # stack in the process's log instead of a bare exit status -11.
    # (The process's own stderr: a caller may have replaced sys.stderr with a stream that has
    # no file descriptor, which faulthandler needs.)
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
        func: Command = args.func
        return func(args, settings)
    except RowbusError as exc:
        if args.verbose:
            log.exception("rowbus %s failed", args.command)
        print(f"rowbus: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`rowbus status | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:
        # Anything not translated into a RowbusError still ends with one line; -v shows where.
        if args.verbose:
            log.exception("rowbus %s failed", args.command)
        print(
            f"rowbus: error: {args.command}: {type(exc).__name__}: {exc}"
            + ("" if args.verbose else " (run with -v for the trace)"),
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
