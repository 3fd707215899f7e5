"""Flags every long-running command offers alike (`rowbus reader run`, `reader node`, `tail`,
`apply`), so the commands agree with each other."""

from __future__ import annotations

import argparse


def add_metrics_port(parser: argparse.ArgumentParser, setting: str) -> None:
    """``--metrics-port PORT``, overriding the configuration's `setting`."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any free port; default: "
        f"{setting}, unset: off)",
    )


def metrics_port(args: argparse.Namespace, configured: int | None) -> int | None:
    """The port asked on the command line, else the configured one."""
    asked: int | None = getattr(args, "metrics_port", None)
    return asked if asked is not None else configured
