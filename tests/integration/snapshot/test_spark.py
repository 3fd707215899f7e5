"""The Spark apply job applies an initial snapshot (read rows) and the changes W2 made while it
ran into an empty sink database (the tables come from the snapshot's CREATEs); `rowbus verify`
finds it equal to the source."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread
from tests.integration.snapshot.helpers import Writer, fill, snapshot_state

ROWS_PER_TABLE = 1_500


def test_spark_apply_of_a_snapshot_with_concurrent_writes_ends_equal(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    tmp_path: Path,
) -> None:
    from rowbus.spark_apply.job import BatchApplier, start_query
    from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark

    server = services.sources[0]
    topic = make_topic("snapspark", partitions=3)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=topic,  # the job reads topic "{source}"
        database=make_database(server),
        data_topic="{source}",
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    w2 = fill(server, setup.database, ROWS_PER_TABLE)
    # An empty sink database: the job creates the tables from the snapshot's CREATEs.
    sink_db = make_database(services.resolved_sink)
    writer = Writer(server, w2)
    writer.start()
    index = TopicReader(services, setup.checkpoints_topic)
    job = f"snap_{uuid.uuid4().hex[:8]}"
    routes = [RouteSettings(match=f"{setup.database}.*", target=f"{sink_db}.{{table}}")]
    config = job_config(services, job, [setup.source], setup.schemas_topic, routes, tmp_path / "cp")
    try:
        with reader_thread(
            setup, snapshot="initial", snapshot_chunk_rows=500, heartbeat_interval_s=0.3
        ):
            index.until(
                lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
                timeout=240,
                what="the snapshot to finish",
            )
            writer.finish()
            applier = BatchApplier(config).start()
            try:
                query = start_query(shared_spark(), config, applier)
                try:

                    def equal() -> bool:
                        if query.exception() is not None:
                            raise _QueryFailed(str(query.exception())[:2000])
                        diffs = verify(services, routes, [setup.database])
                        return len(diffs) == 8 and all(d.equal for d in diffs)

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


class _QueryFailed(Exception):
    """The streaming query stopped with an error: waiting longer cannot help."""
