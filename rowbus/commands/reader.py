"""`rowbus reader run --source NAME`: tail one source and publish it to Kafka."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import FrameType

from rowbus.clients.prometheus import Exporter
from rowbus.config import Settings

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reader = sub.add_parser("reader", help="binlog readers")
    actions = reader.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="tail one source's binlog and publish it to Kafka exactly once; several readers "
        "of one source elect a leader in ZooKeeper; SIGTERM/SIGINT stop after the open batch",
    )
    run.add_argument("--source", required=True, help="name of a source in the configuration")
    run.add_argument("--reader-id", default=None, help="this reader's name (default: host-pid)")
    run.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any free port; default: "
        "reader.metrics_port, unset: off)",
    )
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.warning("signal %d: finishing the open batch and stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    from rowbus.producer.reader import Reader
    from rowbus.producer.settings import Services

    source = settings.source(args.source)
    services = Services(
        kafka=settings.kafka.client_config(),
        zookeeper_hosts=settings.zookeeper.hosts,
        zookeeper_root=settings.zookeeper.root,
        zookeeper_session_timeout_s=settings.zookeeper.session_timeout_s,
    )
    reader_settings = settings.reader
    if args.reader_id:
        reader_settings = reader_settings.model_copy(update={"reader_id": args.reader_id})
    reader = Reader(source, reader_settings, services)
    port = args.metrics_port if args.metrics_port is not None else reader_settings.metrics_port
    exporter = None
    if port is not None:
        exporter = Exporter()
        exporter.register(
            "reader",
            reader.metrics.prometheus,
            labels={"errors_total": "kind", "xa_prepared_age_seconds": "xid"},
            static={"source": source.name, "reader": reader.reader_id},
        )
        bound = exporter.serve(port)
        log.warning("reader %s metrics on http://127.0.0.1:%d/metrics", reader.reader_id, bound)
    try:
        reader.run(stop)
    finally:
        if exporter is not None:
            exporter.close()
    log.warning("reader %s stopped: %s", reader.reader_id, reader.metrics.snapshot())
    return 0
