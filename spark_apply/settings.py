"""The ``apply`` settings section, and the whole configuration of one apply job.

`ApplySettings` is the section of rowbus' YAML file (``apply:``); `JobConfig` adds what the job
borrows from the rest of the configuration (Kafka client settings, the sink) so the job, which
runs under ``spark-submit`` without the application shell, reads one JSON file.
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from rowbus.clients import kafka
from rowbus.clients.settings import (
    MySQLConnection,
    StrictModel,
    ZooKeeperAuth,
    read_referenced,
)
from rowbus.protocol.topics import CONTROL_TOPIC, DEFAULT_DATA_TOPIC_TEMPLATE, SCHEMAS_TOPIC
from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.exceptions import ApplyError

THROUGHPUT_BATCH = 200_000
"""`ApplySettings.max_offsets_per_trigger` of throughput mode where none is set."""


class ShardDdlSettings(StrictModel):
    """Coordination of DDL on sharded routes (see shard_ddl/README.md)."""

    tables: tuple[str, ...] = ()
    """Upstream tables of the shard groups as ``source/schema.table``; empty: `rowbus apply`
    lists the tables of every source that a sharded route matches when the job starts."""
    control_topic: str = CONTROL_TOPIC
    """The topic where shards report their DDL and the coordinator its steps."""
    optimistic: bool = False
    """Apply compatible DDL (ADD COLUMN with a default, widening) at first sight; see the
    README for its risks."""
    state_database: str = Field("rowbus_shard_ddl", pattern=r"^[A-Za-z0-9_]{1,64}$")
    """Database in the sink holding the executed-DDL markers."""
    election: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """Jobs sharing a target elect one coordinator per election name in ZooKeeper."""
    wedge_report_s: float = Field(60.0, gt=0)
    """A lock still waiting for shards this long after the job saw it open is reported: one
    WARNING line naming it, the shards it waits for and where each is, also kept on the lock
    (`rowbus status`, `rowbus ddl-locks`) and counted in the ``stuck_locks`` metric."""


class IcebergMaintenanceSettings(StrictModel):
    """Maintenance of the Iceberg tables (`rowbus iceberg maintain`, or the job every
    `every_batches`; spark_apply README "Iceberg maintenance")."""

    every_batches: int = Field(0, ge=0)
    """The job maintains the tables it wrote after every this many batches, between two
    batches (0: only `rowbus iceberg maintain` does)."""
    compact_min_files: int = Field(8, ge=2)
    """A table is compacted (its data files rewritten into as few as the target file size
    allows; a change log's events each once, in commit order) when it has at least this many
    data files."""
    keep_batches: int = Field(2, ge=1)
    """Snapshots older than the first commit of each job's newest this many batches are
    expired; a replayed batch needs only its own commits (the state database holds every
    earlier batch whole), so 1 keeps exactly once and 2 leaves a margin."""
    orphan_age_s: float = Field(3600.0, ge=0)
    """Files under a table's location that no kept snapshot nor metadata file references are
    deleted once older than this (a writer's data files before its commit are such files:
    the age keeps them). Local warehouses only."""


class IcebergSettings(StrictModel):
    """The Iceberg sink (``apply.sink_kind: iceberg``, spark_apply README "The Iceberg sink").

    The rows go into Iceberg tables; the job's checkpoints and stash stay in the MySQL sink's
    ``apply.state_database`` (the ``sink`` connection), and each Iceberg commit names its job,
    batch and step in its snapshot summary, so a replayed step finds it and is skipped."""

    catalog: dict[str, str] = Field(
        default_factory=lambda: {
            "type": "sql",
            "uri": "sqlite:///.rowbus/iceberg/catalog.db",
            "warehouse": ".rowbus/iceberg/warehouse",
        }
    )
    """pyiceberg catalog properties (``type: sql`` with ``uri``, or ``type: rest`` with ``uri``,
    ``warehouse``, credentials…; ``name``: the catalog's name, ``rowbus`` unless given — a SQL
    catalog keeps each name's tables apart): the default is a SQL catalog in a local sqlite
    file with a local warehouse folder (a warehouse without a scheme is a local folder;
    relative paths are the job's working directory's)."""
    namespace: str | None = Field(None, pattern=r"^[A-Za-z0-9_]{1,128}$")
    """The Iceberg namespace of every table; unset: the target's schema (as routed)."""
    forms: tuple[Literal["current", "changelog"], ...] = ("current",)
    """Which tables each target gets: ``current`` (the table's current state, upserts and
    deletes by primary key; a table without one by all its columns, one row at a time) and/or
    ``changelog`` (every event appended, named ``<table><changelog_suffix>``; its commit
    order: ``ORDER BY _ts, _source, _binlog_file, _binlog_offset, _txn_index``)."""
    changelog_suffix: str = Field("_changelog", pattern=r"^[A-Za-z0-9_]{1,64}$")
    """The change-log table's name after its target's."""
    expire_after_batches: int = Field(0, ge=0)
    """After each batch, expire the snapshots of the tables it wrote that are older than this
    job's commits of the batch this many batches before it (0: never). A replayed batch only
    needs its own commits' snapshots (the state database holds every earlier batch whole), so
    any value ≥ 1 keeps exactly once. pyiceberg 0.12 expires metadata only: the data files of
    expired snapshots stay in the warehouse until `maintenance` removes them as orphans."""
    maintenance: IcebergMaintenanceSettings = Field(default_factory=IcebergMaintenanceSettings)
    """Compaction, snapshot expiry and orphan-file removal."""
    writers: Literal["driver", "executors"] = "driver"
    """Who writes a step's data files: ``driver`` (pyarrow → pyiceberg in the driver) or
    ``executors`` (one Spark job per step: each task converts its share of a table's rows and
    writes it as Parquet data files in the table's location, the driver commits them; spark_apply
    README "Data files written by the executors"). The commits, their marks and the replay are
    the same either way."""
    zero_dates: Literal["refuse", "null"] = "refuse"
    """A MySQL zero date (``0000-00-00``, ``2024-00-15``), which no Iceberg date holds:
    ``refuse`` stops the job at the row (one line naming table, column and position); ``null``
    stores NULL (a loss, by choice)."""


class ApplySettings(StrictModel):
    """The Spark apply job."""

    job: str = Field("rowbus-apply", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    """Name of the job: the key of its checkpoint rows in the sink."""
    sources: tuple[str, ...] = ()
    """Upstream sources whose watermarks gate the release; empty: every configured source."""
    topic_template: str = DEFAULT_DATA_TOPIC_TEMPLATE
    """The readers' data topic template (``{source}``: each of `sources`)."""
    schemas_topic: str = SCHEMAS_TOPIC
    """The readers' schemas topic."""
    mode: Literal["snapshot", "parallel", "throughput"] = "snapshot"
    """snapshot: one batch is one sink transaction; parallel: one transaction per shard;
    throughput: rows read, keyed, collapsed and written by executor tasks, one transaction
    per task, the driver working per batch (spark_apply README "Throughput mode")."""
    parallelism: int = Field(4, ge=1, le=64)
    """Shards (and sink connections) of parallel mode; write tasks of throughput mode."""
    executor_writes: bool = True
    """Parallel mode: each shard's transaction runs as a Spark task on an executor (False: on
    the driver's threads)."""
    checkpoint_location: Path = Path(".rowbus/apply-checkpoint")
    """Spark's checkpoint folder (offsets and commits); keep it with the sink it belongs to."""
    state_database: str = Field("rowbus_apply", pattern=r"^[A-Za-z0-9_]{1,64}$")
    """Database in the sink holding the checkpoint and stash tables."""
    kafka_format: Literal["python", "spark"] = "python"
    """python: the confluent-kafka data source; spark: Spark's kafka connector (needs its jar)."""
    max_offsets_per_trigger: int | None = Field(50_000, ge=1)
    """Records per micro-batch; unset in throughput mode without a sharded route: 200,000.
    Snapshot and parallel mode decode a whole batch on the driver, so this bounds its memory
    (measured, `benchmarks.bounded --only big`: driver peak 616 MB at 200k, 278 MB at 50k).
    Throughput mode's driver holds no rows (but for a batch it falls back on, a DDL's, and
    every batch of a job with a sharded route), and each batch costs its Spark jobs and
    tasks about a second of CPU whatever its size: 200k against 50k took it from 24.6k to 36.9k
    rows/s (`benchmarks.apply --mode throughput`, spark_apply README "Batch size in throughput
    mode")."""
    trigger_interval_s: float = Field(0.0, ge=0)
    """Seconds between micro-batches (0: the next starts as soon as the last is handed on)."""
    overlap_batches: bool = True
    """Write a batch while Spark reads and decodes the next (one batch in flight; Spark's
    commit log may then be one batch ahead of the sink, which the next start mends:
    spark_apply README "Overlapping batches"). False: each batch is written before Spark
    commits it."""
    available_now: bool = False
    """Apply what is in the topics now, then stop."""
    routes: tuple[RouteSettings, ...] = ()
    unrouted: Literal["identity", "skip", "error"] = "identity"
    """What happens to a table no route matches: same schema.table, ignored, or an error."""
    shard_ddl: ShardDdlSettings = ShardDdlSettings()
    master: str = "local[2]"
    """The Spark master of ``rowbus apply``; under ``spark-submit --master …`` the job keeps the
    master spark-submit chose."""
    spark_conf: dict[str, str] = Field(default_factory=dict)
    """Spark settings for the job's session (``spark.executor.memory: 4g``, …)."""
    sink_retry_s: float = Field(300.0, ge=0)
    """How long the job waits for a sink it lost (unreachable, or a deadlock it kept
    hitting): the query stops and starts again from its checkpoint once the sink answers. 0:
    the job stops at once."""
    metrics_port: int | None = Field(None, ge=0, le=65535)
    """Serve Prometheus metrics on 127.0.0.1:<port>/metrics (0: any free port; unset: off)."""
    jdbc_jar: Path | None = None
    """A JDBC driver jar to put on the classpath (e.g. Debian's mariadb-java-client.jar)."""
    sink_kind: Literal["mysql", "iceberg"] = "mysql"
    """Where the rows go: the MySQL/MariaDB sink, or Iceberg tables (`iceberg`; snapshot mode
    only). Either way the job's checkpoints live in the MySQL sink's `state_database`."""
    iceberg: IcebergSettings = IcebergSettings()
    """The Iceberg sink's catalog, namespace and table forms (``sink_kind: iceberg``)."""

    @model_validator(mode="before")
    @classmethod
    def _throughput_batch(cls, data: Any) -> Any:
        """Throughput mode's larger batch where none is set (`max_offsets_per_trigger`), unless
        a route is sharded: shard-DDL coordination sends every batch to the driver's path
        (`owned.apply_owned`), whose memory the smaller batch bounds. Written into the
        settings, so the job reads it back from the JSON its shell hands it."""
        if (
            isinstance(data, dict)
            and data.get("mode") == "throughput"
            and "max_offsets_per_trigger" not in data
            and not any(_sharded(route) for route in data.get("routes") or ())
        ):
            return {**data, "max_offsets_per_trigger": THROUGHPUT_BATCH}
        return data

    @model_validator(mode="after")
    def _iceberg_mode(self) -> ApplySettings:
        if self.sink_kind == "iceberg" and self.mode != "snapshot":
            raise ValueError(
                f"apply.sink_kind iceberg writes in snapshot mode only (apply.mode is "
                f"{self.mode}): set apply.mode: snapshot"
            )
        return self


def _sharded(route: Any) -> bool:
    """Whether a route as given (settings or their mapping) is sharded; one that does not
    validate is not, and is refused with its own message when the routes are validated."""
    if isinstance(route, RouteSettings):
        return route.sharded
    try:
        return RouteSettings.model_validate(route).sharded
    except ValidationError:
        return False


SinkConnection = MySQLConnection
"""The sink, as the job's configuration holds it: the one MySQL connection type."""


class JobConfig(StrictModel):
    """Everything the job reads: the apply section, Kafka client settings, the sink."""

    apply: ApplySettings = ApplySettings()
    kafka: dict[str, str | int | float | bool] = Field(default_factory=dict, repr=False)
    """librdkafka settings, rendered (``bootstrap.servers`` at least; not in repr: secrets),
    those of `kafka_from_file` and `kafka_from_env` included once read."""
    kafka_from_file: dict[str, Path] = Field(default_factory=dict)
    """librdkafka settings read from files where the job starts (``kafka.client_from_file``),
    kept by reference in the job's configuration file."""
    kafka_from_env: dict[str, str] = Field(default_factory=dict)
    """librdkafka settings read from variables where the job starts
    (``kafka.client_from_env``), kept by reference in the job's configuration file."""
    sink: SinkConnection = SinkConnection()
    source_names: tuple[str, ...] = ()
    """All configured sources, used when `apply.sources` is empty."""
    zookeeper_hosts: str | None = None
    zookeeper_root: str = "/rowbus"
    zookeeper_auth: ZooKeeperAuth | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_references(cls, data: Any) -> Any:
        """`kafka` with the settings given by reference read now, where the job starts."""
        if isinstance(data, dict) and (data.get("kafka_from_file") or data.get("kafka_from_env")):
            read = read_referenced(
                {k: Path(v) for k, v in (data.get("kafka_from_file") or {}).items()},
                data.get("kafka_from_env") or {},
                "kafka.client",
            )
            data = {**data, "kafka": {**(data.get("kafka") or {}), **read}}
        return data

    @property
    def shard_tables(self) -> list[tuple[str, str, str]]:
        """`apply.shard_ddl.tables` as (source, schema, table)."""
        found = []
        for text in self.apply.shard_ddl.tables:
            source, _, qualified = text.partition("/")
            schema, _, table = qualified.partition(".")
            found.append((source, schema, table))
        return found

    @property
    def sources(self) -> tuple[str, ...]:
        return self.apply.sources or self.source_names

    def dump(self) -> str:
        """JSON of the whole configuration, inline secrets revealed (a program or test that
        launches the job itself, and holds the secrets anyway); a ``password_file`` or
        ``password_env`` is kept by name (`MySQLConnection.plain`; the driver and every
        executor then read it themselves when they connect). `rowbus apply` writes `at_rest`
        instead."""
        return json.dumps(self._plain(), indent=2, sort_keys=True)

    def _plain(self) -> dict[str, Any]:
        data = self._dumped()
        data["sink"] = self.sink.plain()
        if self.zookeeper_auth is not None:
            data["zookeeper_auth"] = self.zookeeper_auth.plain()
        return data

    def shown(self) -> str:
        """JSON fit to print (``rowbus apply --print-config``): every secret masked as
        ``rowbus config show`` masks it (pydantic's `SecretStr`, `kafka.redacted` for the
        librdkafka settings); a ``password_file`` or ``password_env`` kept by name. A job
        started from it with a masked value is refused in one line (`load`)."""
        data = self._dumped()
        data["kafka"] = kafka.redacted(data["kafka"])
        return json.dumps(data, indent=2, sort_keys=True)

    def _dumped(self) -> dict[str, Any]:
        """JSON data, the settings given by reference left out of `kafka` (read again where
        the job starts)."""
        data = self.model_dump(mode="json")
        referenced = {*self.kafka_from_file, *self.kafka_from_env}
        data["kafka"] = {k: v for k, v in data["kafka"].items() if k not in referenced}
        return data

    def at_rest(self) -> tuple[str, dict[str, str]]:
        """(the job's configuration file, the environment to start the job with), for a
        launcher that starts the job itself (`rowbus apply`): the file holds no secret — the
        sink's and ZooKeeper's inline passwords and the Kafka client's inline secret settings
        travel in the variable `SECRETS_ENV` of the job's environment, which `load` reads and
        removes before Spark starts, so the JVM and its Python workers never inherit it.

        Why the environment and not a second file: a file lives on disk as long as the job
        (days, for a streaming job) and in every backup of its folder; a variable of one
        process lives in that process's memory only and, like a 0600 file, is readable by its
        user and root alone (``/proc/PID/environ``). A ``password_file``/``password_env`` the
        user configured, and ``kafka.client_from_file``/``client_from_env``, stay references,
        read by whoever connects (the job reads the Kafka ones when it starts)."""
        data = self._plain()
        secrets: dict[str, str] = {}
        if self.sink.password_file is None and self.sink.password_env is None:
            secrets["sink.password"] = str(data["sink"].pop("password"))
        if self.zookeeper_auth is not None and "password" in data["zookeeper_auth"]:
            secrets["zookeeper_auth.password"] = str(data["zookeeper_auth"].pop("password"))
        public, hidden = kafka.split_secrets(data["kafka"])
        data["kafka"] = public
        secrets.update({f"kafka.{k}": json.dumps(v) for k, v in hidden.items()})
        env = {SECRETS_ENV: json.dumps(secrets)} if secrets else {}
        return json.dumps(data, indent=2, sort_keys=True), env

    @classmethod
    def load(cls, text: str, where: str, environ: MutableMapping[str, str]) -> JobConfig:
        """The job's configuration from the JSON `text` of file `where`, with the secrets a
        launcher handed over in `SECRETS_ENV` (`at_rest`; the variable is removed from
        `environ`). A secret still masked (a file printed by ``--print-config``) is refused
        with one line saying where to give it (`ApplyError`)."""
        data = json.loads(text)
        handed = json.loads(environ.pop(SECRETS_ENV, "{}"))
        for path, value in handed.items():
            section, _, key = path.partition(".")
            if section == "kafka":
                data.setdefault("kafka", {})[key] = json.loads(value)
            else:
                data.setdefault(section, {})[key] = value
        masked = [
            f"{section}.{key}"
            for section in ("sink", "zookeeper_auth", "kafka")
            for key, value in (data.get(section) or {}).items()
            if value == kafka.MASK and (section == "kafka" or key == "password")
        ]
        if masked:
            raise ApplyError(
                f"{where}: {', '.join(masked)} is masked (the file was printed by rowbus apply "
                "--print-config, which never prints a secret): give each as a reference in "
                "rowbus' configuration before printing (password_file or password_env; "
                "kafka.client_from_file or client_from_env), or edit it into the file"
            )
        return cls.model_validate(data)


SECRETS_ENV = "ROWBUS_APPLY_SECRETS"
"""The variable in which a launcher hands the job the secrets its configuration file leaves
out (`JobConfig.at_rest`): JSON, ``{"sink.password": …, "kafka.sasl.password": …}``."""


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python driver: its JVM (which holds the master it
    chose) hands the driver its gateway in the environment. A ``SparkConf()`` built before the
    gateway is up cannot tell: it holds no JVM properties yet (seen on a standalone cluster,
    where checking it left the job on ``local[2]``)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
