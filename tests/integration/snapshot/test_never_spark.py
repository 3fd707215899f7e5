"""A reader started with `snapshot: never` on tables the sink does not have, W2 updating,
inserting and deleting their rows, then `rowbus snapshot` of them: the Spark apply job creates
each table from the definition the reader publishes before its first streamed row (PROTOCOL.md
§9.6), applies the streamed changes and the incremental snapshot's rows, and `rowbus verify`
finds the sink equal to the source, with no table made by hand. Before 1.5 the job stopped at
the first streamed change ("missing target table")."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from rowbus.config import Settings
from rowbus.producer.snapshot.signals import publish
from rowbus.protocol.events import ReaderCheckpoint
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.snapshot.helpers import Writer, fill, snapshot_state

ROWS_PER_TABLE = 400


class _QueryFailed(Exception):
    """The streaming query stopped with an error: waiting longer cannot help."""


def test_never_snapshotted_tables_reach_an_empty_sink_and_end_equal(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    tmp_path: Path,
) -> None:
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    server = services.sources[0]
    topic = make_topic("never", partitions=3)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,  # the job reads topic "{source}"
        database=make_database(server),
        data_topic="{source}",
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    # Rows older than the binlog window the reader reads, in tables the sink does not have.
    w2 = fill(server, setup.database, ROWS_PER_TABLE, binlog=False)
    sink_db = make_database(services.resolved_sink)
    signals = make_topic("control", partitions=1)
    writer = Writer(server, w2, pause_s=0.005)
    index = TopicReader(services, setup.checkpoints_topic)
    job = f"never_{uuid.uuid4().hex[:8]}"
    routes = [RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}")]
    config = job_config(services, job, [setup.source], setup.schemas_topic, routes, tmp_path / "cp")
    asked = [f"{setup.database}.{n}" for n in w2.names()]
    try:
        with reader_thread(
            setup,
            snapshot="never",
            start="latest",
            signal_topic=signals,
            snapshot_chunk_rows=150,
            heartbeat_interval_s=0.3,
        ):
            index.until(
                lambda rs: any(
                    isinstance(r, ReaderCheckpoint) and r.source == setup.source for r in rs
                ),
                timeout=60,
                what="the reader to lead",
            )
            writer.start()
            applier = BatchApplier(config).start()
            try:
                query = start_query(shared_spark(), config, applier)
                try:

                    def applying() -> bool:
                        if query.exception() is not None:
                            raise _QueryFailed(str(query.exception())[:2000])
                        return query.lastProgress is not None

                    wait_for(
                        applying,
                        timeout=180,
                        interval=1.0,
                        what="the job's first batch",
                        stop_on=(_QueryFailed,),
                    )
                    publish(services.kafka.client_config(), signals, setup.source, asked)
                    index.until(
                        lambda rs: (
                            (s := snapshot_state(rs, setup.source)) is not None
                            and len(s.backfills) == len(asked)
                            and all(b.done and b.refused is None for b in s.backfills.values())
                        ),
                        timeout=240,
                        what="the incremental snapshot to finish",
                    )
                    assert writer.finish() > 0

                    def equal() -> bool:
                        if query.exception() is not None:
                            raise _QueryFailed(str(query.exception())[:2000])
                        diffs = verify(services, routes, [setup.database])
                        return len(diffs) == len(asked) and all(d.equal for d in diffs)

                    wait_for(
                        equal,
                        timeout=300,
                        interval=2.0,
                        what="the sink to equal the source",
                        stop_on=(_QueryFailed,),
                    )
                finally:
                    query.stop()
            finally:
                applier.close()
    finally:
        writer.stop.set()
        index.close()
        with connect(services.resolved_sink) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
