"""Topic names, system topic keys and configs."""

from __future__ import annotations

import pytest

from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.topics import (
    CHECKPOINTS_TOPIC,
    CHECKPOINTS_TOPIC_CONFIG,
    CONTROL_TOPIC,
    DATA_TOPIC_CONFIG,
    DEFAULT_DATA_TOPIC_TEMPLATE,
    SCHEMAS_TOPIC,
    SCHEMAS_TOPIC_CONFIG,
    checkpoint_key,
    control_key,
    data_topic,
    per_table,
    schema_key,
)


def test_default_names() -> None:
    assert data_topic(DEFAULT_DATA_TOPIC_TEMPLATE, "db1", "shop", "orders") == "rowbus.db1"
    assert (CHECKPOINTS_TOPIC, SCHEMAS_TOPIC, CONTROL_TOPIC) == (
        "rowbus.checkpoints",
        "rowbus.schemas",
        "rowbus.control",
    )
    assert not per_table(DEFAULT_DATA_TOPIC_TEMPLATE)


def test_templates_with_schema_and_table() -> None:
    template = "cdc.{source}.{schema}.{table}"
    assert data_topic(template, "db1", "shop", "orders") == "cdc.db1.shop.orders"
    assert per_table(template)
    with pytest.raises(ProtocolError, match="needs schema, table"):
        data_topic(template, "db1")


@pytest.mark.parametrize("template", ["x.{host}", "x.{source!r}", "x.{source:>9}", "x.{"])
def test_bad_templates_are_refused(template: str) -> None:
    with pytest.raises(ProtocolError):
        data_topic(template, "db1", "s", "t")


@pytest.mark.parametrize("source", ["a b", "é", "x" * 250, ".."])
def test_illegal_topic_names_are_refused(source: str) -> None:
    with pytest.raises(ProtocolError, match="not a legal Kafka topic name"):
        data_topic("{source}", source)


def test_configs_and_keys() -> None:
    assert DATA_TOPIC_CONFIG["retention.ms"] == "-1"
    assert DATA_TOPIC_CONFIG["cleanup.policy"] == "delete"
    assert CHECKPOINTS_TOPIC_CONFIG["cleanup.policy"] == "compact"
    assert SCHEMAS_TOPIC_CONFIG["cleanup.policy"] == "compact"
    assert checkpoint_key("db1") == b"db1"
    assert schema_key(123) == b"123"
    assert control_key("lock-1") == b"lock-1"
