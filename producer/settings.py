"""Typed settings of the binlog reader (the ``reader`` section of the rowbus configuration).

`ReaderSettings` is what the YAML file holds; `SourceConnection` is what the application shell
hands over for one source (producer/ does not import the shell's configuration types).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from rowbus.clients.settings import StrictModel, ZooKeeperAuth
from rowbus.producer.cluster.settings import ClusterSettings
from rowbus.protocol.topics import CHECKPOINTS_TOPIC, DEFAULT_DATA_TOPIC_TEMPLATE, SCHEMAS_TOPIC


class DispatchSettings(StrictModel):
    """How rows of the tables matching a pattern are spread over partitions."""

    rule: Literal["primary_key", "table", "columns"] = "primary_key"
    """``primary_key``: by each row's key (rows of one key stay in order on one partition);
    ``table``: every row of a table on one partition; ``columns``: by `columns`."""
    columns: tuple[str, ...] = ()
    """The columns whose values pick the partition (rule ``columns``)."""


class DebeziumSettings(StrictModel):
    """The ``debezium`` encoding (`encoding: debezium`): data topics as Debezium's MySQL
    connector writes them with Kafka Connect's JsonConverter (docs/debezium.md)."""

    topic_prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,200}$")
    """Debezium's ``topic.prefix``: first part of every topic name and ``source.name``;
    default: the source's name."""
    topics: Literal["debezium", "rowbus"] = "debezium"
    """Data topic names: ``debezium``: ``<prefix>.<db>.<table>``, one per table, as Debezium
    names them; ``rowbus``: by ``topic_template``."""
    schemas: bool = True
    """JsonConverter's ``schemas.enable``: each key and value as ``{"schema", "payload"}``
    (False: the payload alone)."""
    transaction_metadata: bool = False
    """Debezium's ``provide.transaction.metadata``: BEGIN/END records on
    ``<prefix>.transaction`` and a ``transaction`` block in each row."""


class ReaderSettings(StrictModel):
    """Settings shared by every reader; the source itself is named on the command line."""

    start: str = "latest"
    """Where to start when the source has no checkpoint yet, in the one start-position grammar
    (`rowbus.protocol.positions`): ``earliest``, ``latest``, ``gtid:<gtid set>`` (MariaDB
    ``0-1-42`` or MySQL ``uuid:1-42``: start after it), ``file:<binlog file>:<pos>`` (a
    transaction boundary) or ``timestamp:<unix seconds or ISO date-time>`` (the first
    transaction committed at or after it); ``SOURCE@`` may prefix a GTID or file position."""
    deployment: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Names this deployment in the reader's Kafka transactional.id, so two deployments (another
    ZooKeeper root, other topics) reading sources of the same name never fence each other;
    default: derived from ``zookeeper.root`` and the checkpoints topic."""
    reader_id: str | None = None
    """This reader's name in the election, heartbeats and checkpoints (default: host-pid)."""
    server_id: int | None = Field(None, ge=1, le=2**32 - 1)
    """Replica server id to register with (default: derived from the reader id)."""
    topic_template: str = DEFAULT_DATA_TOPIC_TEMPLATE
    """Data topic name, from ``{source}``, ``{schema}`` and ``{table}`` (PROTOCOL.md §7)."""
    partitions: int = Field(3, ge=1)
    """Partitions of a data topic the reader creates because it is missing."""
    checkpoints_topic: str = CHECKPOINTS_TOPIC
    """The compacted topic of the readers' checkpoints (where each resumes)."""
    schemas_topic: str = SCHEMAS_TOPIC
    """The compacted topic of table schemas by id."""
    encoding: Literal["protobuf", "avro", "json", "debezium"] = "protobuf"
    """How records are encoded (PROTOCOL.md §5); consumers read the first three.
    ``debezium``: data topics as Debezium writes them (see `debezium`), for Debezium's
    consumers; rowbus's own consumers (tail, Subscriber, the apply job) refuse such topics.
    The checkpoints and schemas topics stay protobuf."""
    debezium: DebeziumSettings = DebeziumSettings()
    """The ``debezium`` encoding's settings."""
    include_schemas: tuple[str, ...] = ()
    """Schema patterns (fnmatch) to read; empty means all but the system schemas."""
    exclude_schemas: tuple[str, ...] = ()
    """Schema patterns (fnmatch) never read, even when included."""
    include_tables: tuple[str, ...] = ()
    """``schema.table`` patterns to read; empty means every table of an included schema."""
    exclude_tables: tuple[str, ...] = ()
    """``schema.table`` patterns never read, even when included."""
    online_ddl: bool = True
    """gh-ost and pt-online-schema-change followed as DM's online-DDL mode does: their tables
    (``_*_gho``, ``_*_ghc``, ``_*_del``, ``_*_new``, ``_*_old``) are not published and each
    cut-over RENAME is published as the ALTER they made (`rowbus.producer.online_ddl`). On by
    default: otherwise every row is published twice, and a routed, filtered or sharded table
    gets a RENAME whose ghost table its sink never had. False: a table of yours named so is
    published, and the tools' statements pass as they are."""
    dispatch: dict[str, DispatchSettings] = Field(default_factory=dict)
    """``schema.table`` pattern → dispatch rule; first match wins, default by primary key."""
    flush_rows: int = Field(20_000, ge=1)
    """Commit a Kafka transaction once this many events are buffered..."""
    fragment_rows: int = Field(10_000, ge=1)
    """An upstream transaction with more changes is published in fragments of about this many
    (bounded memory, short Kafka transactions; PROTOCOL.md §9.1)."""
    flush_bytes: int = Field(8 * 1024 * 1024, ge=1)
    """...or this many encoded bytes..."""
    flush_interval_s: float = Field(0.2, gt=0)
    """...or when the oldest buffered transaction is this old."""
    heartbeat_interval_s: float = Field(1.0, gt=0)
    """Emit a heartbeat when caught up and idle for this long."""
    xa_prepared_warn_s: float = Field(300.0, gt=0)
    """An XA transaction prepared and not committed for this long (it holds every checkpoint)
    is named in one warning and in the ``xa_prepared_age_seconds`` metric."""
    metrics_port: int | None = Field(None, ge=0, le=65535)
    """Serve Prometheus metrics on 127.0.0.1:<port>/metrics (0: any free port; unset: off)."""
    election: bool = True
    """Elect one leader per source through ZooKeeper; off runs a single reader unguarded."""
    cluster: ClusterSettings = ClusterSettings()
    """Reader cluster nodes (`rowbus reader node`): membership, coordinator, balancing."""
    snapshot: Literal["initial", "when_needed", "never", "schema_only"] | None = None
    """When to snapshot the source's existing rows (README, Snapshots): ``initial`` on the first
    start, ``when_needed`` also when the checkpoint's position was purged, ``never``,
    ``schema_only`` (schemas, no rows). Default: ``initial``, unless ``start`` is set (a chosen
    binlog window means ``never``)."""
    snapshot_chunk_rows: int = Field(10_000, ge=1)
    """Rows per snapshot chunk: one SELECT (of a keyless table: one cut of a single streaming
    SELECT, when ``snapshot_markers`` is on), one Kafka transaction with the checkpoint."""
    snapshot_parallelism: int = Field(2, ge=1, le=64)
    """Read views (connections) reading tables in parallel during a snapshot."""
    snapshot_markers: bool = True
    """Publish ``snapshot_begin`` / ``snapshot_end`` around each table's snapshot (protocol
    1.5, PROTOCOL.md §9.7), so consumers bring the table to exactly the snapshot's rows: rows
    deleted during a history lost to ``RESET MASTER`` go, a keyless table is not duplicated.
    On by default: the Subscriber, the sharded subscriber and the apply job read them. Off
    only for consumers of protocol 1.4, which refuse the new record kinds. Turned off while a
    keyless table's snapshot is published in part, the reader refuses to start: read again
    without a new begin, its rows would be doubled downstream."""
    signal_topic: str | None = None
    """The topic `rowbus snapshot` signals on (the control topic, ``rowbus.control``): the
    reader follows it and backfills the tables asked while streaming. None: no signals."""
    transaction_timeout_ms: int = Field(60_000, ge=1000)
    """The Kafka transaction timeout of the reader's producer: a reader that dies with a
    transaction open has it aborted by the broker after this long."""
    stall_check_s: float = Field(10.0, gt=0)
    """How often the reader checks that read_committed consumers can read what it committed
    (a partition's last stable offset held behind an unresolved transaction is logged and
    exported as ``stalled_partitions``)."""
    stop_timeout_s: float = Field(30.0, gt=0)
    """After SIGTERM/SIGINT a reader (or reader node) finishes its open batch and exits; if it
    has not within this many seconds (a broker, ZooKeeper or source that no longer answers holds
    it), it exits anyway with status 1 and one line saying so. Nothing is lost: the open Kafka
    transaction never commits, and the next leader resumes from the last checkpoint."""
    kafka: dict[str, str | int | float | bool] = Field(default_factory=dict, repr=False)
    """Extra librdkafka settings for the reader's producer (not in repr: secrets)."""

    @model_validator(mode="after")
    def _debezium_needs_its_encoding(self) -> ReaderSettings:
        # Differs from the defaults, not merely present: a configuration written out whole
        # (the demo's, `rowbus config` dumps) carries the defaults and must load again.
        if self.debezium != DebeziumSettings() and self.encoding != "debezium":
            raise ValueError(
                f"reader.debezium is set but reader.encoding is {self.encoding}: set "
                "reader.encoding: debezium to write Debezium's format, or remove reader.debezium"
            )
        return self


@dataclass(frozen=True)
class Services:
    """The Kafka and ZooKeeper the reader talks to (rendered by the application shell)."""

    kafka: dict[str, str | int | float | bool] = field(repr=False)  # secrets (sasl.password)
    zookeeper_hosts: str | None
    zookeeper_root: str = "/rowbus"
    zookeeper_session_timeout_s: float = 6.0
    zookeeper_auth: ZooKeeperAuth | None = None


def snapshot_mode(settings: ReaderSettings) -> str:
    """The effective ``reader.snapshot``: as set, else ``initial`` unless ``start`` was set."""
    if settings.snapshot is not None:
        return settings.snapshot
    return "never" if "start" in settings.model_fields_set else "initial"


def deployment_id(*parts: str) -> str:
    """A short stable name for the deployment that `parts` (its ZooKeeper root, its
    checkpoints topic) identify."""
    return hashlib.sha1("\0".join(parts).encode(), usedforsecurity=False).hexdigest()[:10]
