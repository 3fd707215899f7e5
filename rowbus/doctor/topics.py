"""`rowbus doctor`: the configuration's existing topics against what rowbus needs of them.

Only topics that exist are checked (a missing one is created by the reader, right); listing
every topic of the cluster never creates one, where asking about one by name would.
"""

from __future__ import annotations

from collections.abc import Mapping

from rowbus.clients import kafka
from rowbus.config import Settings
from rowbus.doctor.report import Check
from rowbus.protocol.topics import (
    CHECKPOINTS_TOPIC_CONFIG,
    CHECKPOINTS_TOPIC_PARTITIONS,
    CONTROL_TOPIC_CONFIG,
    CONTROL_TOPIC_PARTITIONS,
    DATA_TOPIC_CONFIG,
    SCHEMAS_TOPIC_CONFIG,
    SCHEMAS_TOPIC_PARTITIONS,
    data_topic,
    per_table,
)


def wanted_topics(settings: Settings) -> list[tuple[str, int, Mapping[str, str], str]]:
    """(topic, partitions, settings, the setting that names its partitions) of the config."""
    r = settings.reader
    out: list[tuple[str, int, Mapping[str, str], str]] = [
        (r.checkpoints_topic, CHECKPOINTS_TOPIC_PARTITIONS, CHECKPOINTS_TOPIC_CONFIG, ""),
        (r.schemas_topic, SCHEMAS_TOPIC_PARTITIONS, SCHEMAS_TOPIC_CONFIG, ""),
        (
            settings.apply.shard_ddl.control_topic,
            CONTROL_TOPIC_PARTITIONS,
            CONTROL_TOPIC_CONFIG,
            "",
        ),
    ]
    if not per_table(r.topic_template):
        for source in settings.sources:
            out.append(
                (
                    data_topic(r.topic_template, source.name),
                    r.partitions,
                    DATA_TOPIC_CONFIG,
                    "reader.partitions",
                )
            )
    return out


def check_topics(settings: Settings, timeout: float = 15.0) -> list[Check]:
    admin = kafka.admin(settings.kafka.client_config())
    existing = kafka.topic_names(admin, timeout)
    checks = []
    for topic, partitions, config, setting in wanted_topics(settings):
        if topic not in existing:
            continue
        state = kafka.check_topic(admin, topic, partitions, config, timeout, setting=setting)
        if state is None:
            continue
        checks.append(
            Check(
                f"topic {topic}",
                not state.problems,
                required=False,
                detail="; ".join(state.problems)
                or f"{state.partitions} partition(s), settings as rowbus needs them",
                consequence="keys spread over fewer partitions than configured, or records "
                "deleted by retention / not compacted where rowbus relies on it",
                fix=f"recreate {topic} with the partitions and settings above, or change the "
                "configuration to match it",
            )
        )
    return checks
