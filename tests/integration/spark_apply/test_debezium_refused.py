"""The apply job (the real Spark job, `rowbus apply`'s) pointed at a topic of the ``debezium``
encoding: it stops in one line that names the record's topic[partition]@offset, and writes
nothing to the sink."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer  # type: ignore[attr-defined]

from rowbus.config import Settings
from rowbus.protocol.codec import DEBEZIUM_ENCODING, ENCODING_HEADER
from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
from rowbus.protocol.events import Op
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, await_query, start_query
from tests.conftest import connect
from tests.integration.spark_apply.test_spark_apply import job_config, shared_spark
from tests.unit.protocol.test_protocol_debezium import TABLE, _row


def test_a_debezium_topic_stops_the_job_naming_the_record(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic, schemas_topic = make_topic("dbz", 1), make_topic("schemas", 1)
    sink = make_database(services.resolved_sink)
    renderer = DebeziumRenderer(DebeziumOptions("dbz"))
    row = _row(Op.INSERT, None, (1, "a"))
    producer = Producer(services.kafka.client_config())
    producer.produce(
        topic,
        renderer.value(row, TABLE, 1_795_727_077_000),
        renderer.key(row, TABLE),
        headers=[(ENCODING_HEADER, DEBEZIUM_ENCODING.encode())],
    )
    assert producer.flush(30) == 0
    job = unique("job")
    config = job_config(
        services, job, [topic], schemas_topic,
        [RouteSettings(match="shop.*", target=f"{sink}.{{table}}")], tmp_path / "cp",
        available_now=True,
    )  # fmt: skip
    applier = BatchApplier(config).start()
    failure = ""
    try:
        query = start_query(shared_spark(), config, applier)
        try:
            await_query(query, applier)
        except Exception as exc:
            failure = str(exc)
        failure = failure or str(query.exception() or applier.writer.failure() or "")
    finally:
        applier.close()
    assert f"{topic}[0]@0" in failure, failure
    assert "debezium encoding" in failure, failure
    with connect(services.resolved_sink, sink) as conn, conn.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert cur.fetchall() == ()
