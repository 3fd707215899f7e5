"""`rowbus reader run --source NAME`: tail one source and publish it to Kafka; `rowbus reader
node|nodes|move|drain`: the reader cluster (`rowbus.producer.cluster`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from rowbus.clients.prometheus import Exporter
from rowbus.clients.settings import ZooKeeperAuth
from rowbus.commands.common import add_metrics_port, metrics_port, serving_metrics
from rowbus.config import Settings

if TYPE_CHECKING:
    from rowbus.producer.settings import Services

log = logging.getLogger(__name__)

READER_LABELS = {"errors_total": "kind", "xa_prepared_age_seconds": "xid"}
"""The labels of the reader's keyed counters (`ReaderMetrics.prometheus`)."""


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
    add_metrics_port(run, "reader.metrics_port")
    run.set_defaults(func=_run)

    node = actions.add_parser(
        "node",
        help="join the reader cluster: register in ZooKeeper, run the sources the elected "
        "coordinator assigns here (many per node), contend to coordinate; SIGTERM/SIGINT stop "
        "every task after its open batch",
    )
    node.add_argument("--node-id", default=None, help="this node's name (default: host-pid)")
    add_metrics_port(node, "reader.metrics_port")
    node.set_defaults(func=_node)
    nodes = actions.add_parser("nodes", help="list the cluster's nodes and replication sets")
    nodes.add_argument("--json", action="store_true", help="one JSON document")
    nodes.set_defaults(func=_nodes)
    move = actions.add_parser(
        "move", help="move SOURCE to NODE (two-phase) and wait until NODE publishes it"
    )
    move.add_argument("source")
    move.add_argument("node")
    move.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    move.set_defaults(func=_move)
    drain = actions.add_parser(
        "drain",
        help="move every source off NODE and wait until each new owner's watermark passed the "
        "last event NODE published; NODE gets no sources until it registers again",
    )
    drain.add_argument("node")
    drain.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    drain.set_defaults(func=_drain)


def _stop_on_signals(bound_s: float) -> threading.Event:
    """An event SIGTERM/SIGINT set; the process exits (status 1, one line) if it is still
    running `bound_s` seconds (``reader.stop_timeout_s``) after the first signal."""
    stop = threading.Event()

    def _overdue(signum: int) -> None:
        log.error(
            "still running %.0fs after signal %d (reader.stop_timeout_s): a broker, ZooKeeper "
            "or source that does not answer holds the stop; exiting without finishing the open "
            "batch (it never commits: the next leader resumes from the last checkpoint)",
            bound_s,
            signum,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        # The main thread is blocked inside a client call: only a hard exit ends the process.
        os._exit(1)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            return
        log.warning(
            "signal %d: finishing the open batch and stopping (at most %.0fs)", signum, bound_s
        )
        stop.set()
        timer = threading.Timer(bound_s, _overdue, args=(signum,))
        timer.daemon = True
        timer.name = "rowbus-stop-deadline"
        timer.start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stop


def _services(settings: Settings) -> Services:
    from rowbus.producer.settings import Services

    return Services(
        kafka=settings.kafka.client_config(),
        zookeeper_hosts=settings.zookeeper.hosts,
        zookeeper_root=settings.zookeeper.root,
        zookeeper_session_timeout_s=settings.zookeeper.session_timeout_s,
        zookeeper_auth=settings.zookeeper.auth,
    )


def _zookeeper(settings: Settings) -> tuple[str, str, float, ZooKeeperAuth | None]:
    """`admin.session`'s arguments: hosts, root, timeout, credentials."""
    zk = settings.zookeeper
    return zk.hosts or "", zk.root, 10.0, zk.auth


def _run(args: argparse.Namespace, settings: Settings) -> int:
    stop = _stop_on_signals(settings.reader.stop_timeout_s)

    from rowbus.producer.reader import Reader

    source = settings.source(args.source)
    services = _services(settings)
    reader_settings = settings.reader
    if args.reader_id:
        reader_settings = reader_settings.model_copy(update={"reader_id": args.reader_id})
    reader = Reader(source, reader_settings, services)
    port = metrics_port(args, reader_settings.metrics_port)

    def register(exporter: Exporter) -> None:
        exporter.register(
            "reader",
            reader.metrics.prometheus,
            labels=READER_LABELS,
            static={"source": source.name, "reader": reader.reader_id},
        )

    with serving_metrics(port, register, f"reader {reader.reader_id}"):
        reader.run(stop)
    log.warning("reader %s stopped: %s", reader.reader_id, reader.metrics.readings())
    return 0


def _node(args: argparse.Namespace, settings: Settings) -> int:
    stop = _stop_on_signals(settings.reader.stop_timeout_s)
    from rowbus.producer.cluster.node import ClusterNode

    reader_settings = settings.reader
    if args.node_id:
        cluster = reader_settings.cluster.model_copy(update={"node_id": args.node_id})
        reader_settings = reader_settings.model_copy(update={"cluster": cluster})
    node = ClusterNode({s.name: s for s in settings.sources}, reader_settings, _services(settings))
    port = metrics_port(args, reader_settings.metrics_port)

    def register(exporter: Exporter) -> None:
        # The same series as `reader run`'s, one per task the node runs now (label `source`).
        exporter.register_each(
            "reader",
            lambda: {s: t.reader.metrics.prometheus() for s, t in list(node.tasks.items())},
            label="source",
            labels=READER_LABELS,
            static={"node": node.node_id},
        )

    with serving_metrics(port, register, f"reader node {node.node_id}"):
        node.run(stop)
    return 0


def _nodes(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.producer.cluster import admin

    with admin.session(*_zookeeper(settings)) as (c, paths):
        v = admin.view(c, paths)
    sets = admin.rows(v)
    if args.json:
        nodes = {
            n: {"tasks": sorted(st.tasks), "draining": n in v.drains} for n, st in v.nodes.items()
        }
        print(json.dumps({"nodes": nodes, "sets": sets}, indent=2, sort_keys=True))
        return 0
    for name, status in sorted(v.nodes.items()):
        mark = " (draining)" if name in v.drains else ""
        tasks = ", ".join(f"{s}:{t.phase.value}" for s, t in sorted(status.tasks.items()))
        print(f"node {name}{mark}: {tasks or '-'}")
    for row in sets:
        print(
            f"set {row['source']}: {row['state']} owner={row['owner'] or '-'} "
            f"target={row['target'] or '-'} watermark_ts={row['watermark_ts'] or '-'}"
        )
    return 0


def _move(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.producer.cluster import admin

    started = time.monotonic()
    with admin.session(*_zookeeper(settings)) as (c, paths):
        admin.move(c, paths, args.source, args.node, args.timeout)
    print(f"{args.source} publishes on {args.node} ({time.monotonic() - started:.2f} s)")
    return 0


def _drain(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.producer.cluster import admin

    started = time.monotonic()
    with admin.session(*_zookeeper(settings)) as (c, paths):
        admin.drain(c, paths, args.node, args.timeout)
    print(f"{args.node} drained ({time.monotonic() - started:.2f} s)")
    return 0
