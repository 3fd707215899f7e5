"""The apply job in a real Spark session writing to a sink over TLS, in parallel mode with each
shard's transaction run as a Spark task: the sink's user is created ``REQUIRE X509``, so the
driver and every executor must connect with the client certificate, and its password comes
from a file that only its name reaches the job's configuration and the tasks."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rowbus.clients.settings import TlsSettings
from rowbus.config import Settings
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.job import BatchApplier, start_query
from rowbus.spark_apply.settings import ApplySettings, JobConfig, SinkConnection
from rowbus.waiting import wait_for
from tests.integration.spark_apply.harness import SINK_DDL, Model, Publisher
from tests.integration.spark_apply.test_spark_apply import shared_spark
from tests.integration.tls.conftest import TlsServer

PARTITIONS = 2


@pytest.fixture
def sink_user(tls_server: TlsServer) -> Iterator[tuple[str, str]]:
    user, password = f"apply{uuid.uuid4().hex[:8]}", f"Pw-{uuid.uuid4().hex}"
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}' REQUIRE X509")
        cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'")
    yield user, password
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def test_the_apply_job_writes_over_tls_from_the_driver_and_the_executors(
    tls_server: TlsServer,
    services: Settings,
    sink_user: tuple[str, str],
    make_topic: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user, password = sink_user
    secret = tmp_path / "sink-password"
    secret.write_text(password + "\n")
    certs = tls_server.certs
    sink = SinkConnection(
        host="127.0.0.1",
        port=tls_server.port,
        user=user,
        password_file=secret,
        tls=TlsSettings(mode="required", ca=certs.ca, cert=certs.client_cert, key=certs.client_key),
    )
    topic, schemas_topic = make_topic("tls", PARTITIONS), make_topic("tls.schemas", 1)
    upstream, target = unique("up"), unique("tls_sink")
    model = Model(upstream, seed=3)
    publisher = Publisher(services.kafka.client_config(), topic, schemas_topic, topic, PARTITIONS)
    publisher.schemas(list(model.table_schemas.values()))
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{target}`")
        for name in model.table_schemas:
            cur.execute(SINK_DDL.format(db=target, table=name))
    job = unique("job")
    config = JobConfig(
        apply=ApplySettings(
            job=job,
            sources=(topic,),
            topic_template="{source}",
            schemas_topic=schemas_topic,
            routes=(RouteSettings(match=f"{upstream}.*", target=f"{target}.{{table}}"),),
            unrouted="error",
            checkpoint_location=tmp_path / "cp",
            state_database=f"state_{job}",
            mode="parallel",
            parallelism=2,
            executor_writes=True,
        ),
        kafka=services.kafka.client_config(),
        sink=sink,
    )
    written = config.dump()
    assert password not in written
    config = JobConfig.model_validate(json.loads(written))  # as the job reads its file
    caplog.set_level(logging.WARNING, logger="rowbus.spark_apply")
    spark = shared_spark()
    applier = BatchApplier(config).start()
    query = start_query(spark, config, applier)
    try:
        for _ in range(30):
            publisher.txn([model.step()])
        publisher.txn([])  # resolved past the end

        def applied() -> bool:
            with tls_server.root() as conn, conn.cursor() as cur:
                for name, rows in model.rows.items():
                    cur.execute(f"SELECT * FROM `{target}`.`{name}`")
                    if {r[0]: tuple(r) for r in cur.fetchall()} != rows:
                        return False
            return True

        wait_for(
            lambda: applied() or query.exception(),
            timeout=180,
            what="the TLS sink to equal the upstream model",
        )
        assert query.exception() is None, query.exception()
    finally:
        publisher.close()
        query.stop()
        applier.close()
        with tls_server.root() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{target}`")
    with tls_server.root() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(DISTINCT shard) FROM `state_{job}`.apply_checkpoint")
        shards = cur.fetchone()[0]
        cur.execute(f"DROP DATABASE IF EXISTS `state_{job}`")
    assert shards == 2, "parallel mode did not write both shards"
    fallbacks = [r.getMessage() for r in caplog.records if "on the executors failed" in r.message]
    assert not fallbacks, fallbacks  # every shard was written by an executor, none by the driver
    conf = "\n".join(f"{k}={v}" for k, v in spark.sparkContext.getConf().getAll())
    assert password not in conf
