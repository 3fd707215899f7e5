"""Committed records that read_committed consumers cannot read are noticed (issue 17, item 5):
another producer's transaction left open on a data partition holds its last stable offset while
the reader commits on; the reader logs and exports it, `rowbus status` names the partition."""

from __future__ import annotations

import io
import json

from confluent_kafka import Producer

from rowbus.config import load_settings
from rowbus.status import print_status
from rowbus.waiting import wait_for
from tests.integration.producer.helpers import ReaderSetup, reader_thread


def _status(setup: ReaderSetup) -> tuple[int, dict[str, object]]:
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": setup.services.kafka.bootstrap_servers},
        zookeeper={"hosts": setup.services.zookeeper.hosts},
        sources=[{"name": setup.source, "port": setup.server.port}],
        sink={"port": setup.services.resolved_sink.port},
        reader={"checkpoints_topic": setup.checkpoints_topic},
    )
    out = io.StringIO()
    code = print_status(settings, out, as_json_lines=True)
    (reader,) = json.loads(out.getvalue())["readers"]
    return code, reader


def test_a_partition_held_by_an_open_transaction_is_reported(
    reader_setup: ReaderSetup, unique
) -> None:
    setup = reader_setup
    holder = Producer(
        {**setup.services.kafka.client_config(), "transactional.id": unique("holder")}
    )
    holder.init_transactions(15)
    holder.begin_transaction()
    holder.produce(setup.data_topic, b"held", partition=0)
    holder.flush(15)
    open_txn = True
    try:
        with reader_thread(setup, stall_check_s=0.5, heartbeat_interval_s=0.2) as reader:
            wait_for(
                lambda: reader.metrics.stalled_partitions == 1,
                timeout=60,
                what="the reader to notice the held partition",
            )
            (stall,) = reader.stable.stalled
            assert (stall.topic, stall.partition, stall.stable) == (setup.data_topic, 0, 0)
            assert stall.committed > 1, "the reader's own heartbeats are committed past it"
            code, status = _status(setup)
            assert code == 3
            (line,) = status["stalls"]  # type: ignore[misc]
            assert line.startswith(f"{setup.data_topic}[0]@0: read_committed consumers")
            assert "\n" not in line

            holder.abort_transaction(15)
            open_txn = False
            wait_for(
                lambda: reader.metrics.stalled_partitions == 0,
                timeout=60,
                what="the stall to clear once the transaction ended",
            )
            code, status = _status(setup)
            assert status["stalls"] == []
            assert reader.metrics.prometheus()["stalled_partitions"] == 0
    finally:
        if open_txn:
            holder.abort_transaction(15)
