"""The ``subscriber`` section of the configuration."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rowbus.clients.settings import StrictModel
from rowbus.consumers.subscriber import DEFAULT_MEMORY_LIMIT, DEFAULT_READ_AHEAD
from rowbus.protocol.topics import CHECKPOINTS_TOPIC, DEFAULT_DATA_TOPIC_TEMPLATE, SCHEMAS_TOPIC


class SubscriberSettings(StrictModel):
    """How subscribers (`rowbus tail`, the `Subscriber` API) read the data topics."""

    sources: tuple[str, ...] = ()
    """Sources expected on the topics; empty: those the checkpoints topic lists."""
    topic_template: str = DEFAULT_DATA_TOPIC_TEMPLATE
    """The readers' data topic template."""
    checkpoints_topic: str = CHECKPOINTS_TOPIC
    """The readers' checkpoints topic (it lists the sources and their lanes)."""
    schemas_topic: str = SCHEMAS_TOPIC
    """The readers' schemas topic."""
    metrics_port: int | None = Field(None, ge=0, le=65535)
    """Serve Prometheus metrics on 127.0.0.1:<port>/metrics (0: any free port; unset: off)."""
    group_id: str = "rowbus-subscriber"
    """The Kafka consumer group (offsets are the subscriber's own; the group only names it)."""
    memory_limit_events: int = Field(DEFAULT_MEMORY_LIMIT, ge=1)
    """Buffered events kept in memory; beyond it the largest runs spill to disk (a decoded
    row event of a few short columns takes about 1 KB of Python memory)."""
    read_ahead_events: int = Field(DEFAULT_READ_AHEAD, ge=1)
    """Buffered events beyond which partitions running ahead of the merge are paused until the
    merge catches up with them (at most half of `memory_limit_events`)."""
    spill_dir: Path | None = None
    """Where spilled events go (default: the system's temporary folder)."""
    batch_size: int = Field(2000, ge=1)
    """Records read from Kafka per poll."""
    stall_report_s: float = Field(30.0, gt=0)
    """Log why the merge waits once it has waited this long."""
