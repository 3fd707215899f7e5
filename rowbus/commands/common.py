"""Flags every long-running command offers alike (`rowbus reader run`, `reader node`, `tail`,
`apply`), so the commands agree with each other."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rowbus.clients.prometheus import Exporter

log = logging.getLogger(__name__)


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


@contextmanager
def serving_metrics(
    port: int | None, register: Callable[[Exporter], None], what: str
) -> Iterator[None]:
    """Serve the metrics `register` adds on 127.0.0.1:`port` while the block runs (nothing
    when `port` is None); the bound port is logged, named by `what`."""
    if port is None:
        yield
        return
    exporter = Exporter()
    register(exporter)
    bound = exporter.serve(port)
    log.warning("%s metrics on http://127.0.0.1:%d/metrics", what, bound)
    try:
        yield
    finally:
        exporter.close()
