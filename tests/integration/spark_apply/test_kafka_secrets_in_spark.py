"""What Spark shows of the apply job's Kafka settings: the secrets of `kafka.client` never appear
in the streaming query's plan (which Spark logs and shows in its UI), whatever their names."""

from __future__ import annotations

from typing import Any

import pytest

from rowbus.spark_apply.source import RowbusKafkaSource, kafka_options
from tests.integration.spark_apply.test_spark_apply import shared_spark

SECRETS = {
    "sasl.password": "hunter2-pass",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----MIIEvQ",
    "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule u p-jaas",
}


@pytest.fixture(scope="module")
def spark() -> Any:
    return shared_spark()


def test_the_query_plan_shows_no_kafka_secret(spark: Any) -> None:
    spark.dataSource.register(RowbusKafkaSource)
    config = {"bootstrap.servers": "127.0.0.1:9", "sasl.username": "rowbus", **SECRETS}
    df = (
        spark.readStream.format("rowbus_kafka")
        .option("topics", "t")
        .options(**kafka_options(config))
        .load()
    )
    plan = df._jdf.queryExecution().toString()
    for value in SECRETS.values():
        assert value not in plan
    # What is not secret stays readable (a whole option masked would hide the broker too).
    assert "127.0.0.1:9" in plan and "rowbus" in plan
    assert "kafka.secret.ssl.key.pem=" in plan
