"""Topic names, keys of the system topics, and recommended topic configs (PROTOCOL.md §7)."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from types import MappingProxyType

from rowbus.protocol.errors import ProtocolError

DEFAULT_DATA_TOPIC_TEMPLATE = "rowbus.{source}"
CHECKPOINTS_TOPIC = "rowbus.checkpoints"
SCHEMAS_TOPIC = "rowbus.schemas"
CONTROL_TOPIC = "rowbus.control"
PLACEHOLDERS = frozenset({"source", "schema", "table"})

_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}")

#: Data topics keep everything (consumers replay from their checkpoints) and are never
#: compacted: compaction would drop watermarks and intermediate row versions.
DATA_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "message.timestamp.type": "CreateTime",
        # A row is one record: a LONGBLOB row of many MB must fit (Kafka's default is 1 MB).
        "max.message.bytes": str(256 << 20),
    }
)
MAX_RECORD_BYTES = 256 << 20
"""The largest record a reader publishes (a data topic's ``max.message.bytes``)."""
#: Latest checkpoint per source (key: source name).
CHECKPOINTS_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
)
#: The Kafka transactional.id each reader term claimed, latest per source (key: the source's
#: stable transactional.id); read and written by readers only.
WRITERS_TOPIC_CONFIG: Mapping[str, str] = CHECKPOINTS_TOPIC_CONFIG
#: Latest record per schema id (key: the id in decimal); schemas are never deleted.
SCHEMAS_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {"cleanup.policy": "compact", "retention.ms": "-1"}
)
#: The whole lock history (key: lock id); one partition, so all actors see one order.
CONTROL_TOPIC_CONFIG: Mapping[str, str] = MappingProxyType(
    {"cleanup.policy": "delete", "retention.ms": "-1"}
)
CONTROL_TOPIC_PARTITIONS = 1
SCHEMAS_TOPIC_PARTITIONS = 1
CHECKPOINTS_TOPIC_PARTITIONS = 1


def writers_topic(checkpoints_topic: str) -> str:
    """The readers' claims of transactional.ids (PROTOCOL.md §7) beside their checkpoints
    topic: its name and ``.writers``."""
    return f"{checkpoints_topic}.writers"


def check_template(template: str) -> None:
    """ProtocolError unless `template` uses only plain {source}, {schema} and {table}."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ProtocolError(f"malformed topic template {template!r}: {exc}") from None
    for _, name, spec, conv in parts:
        if name is not None and (name not in PLACEHOLDERS or spec or conv):
            raise ProtocolError(
                f"topic template {template!r} may use only {{source}}, {{schema}}, {{table}}"
            )


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def data_topic(
    template: str, source: str, schema: str | None = None, table: str | None = None
) -> str:
    """The data topic for a row of `schema.table` from `source` under `template`.

    ProtocolError if the template needs a schema/table that is not given, or if the name is not
    a legal Kafka topic name (``[A-Za-z0-9._-]``, at most 249 characters).
    """
    check_template(template)
    values = {"source": source, "schema": schema, "table": table}
    missing = sorted(n for n in _placeholders(template) if values[n] is None)
    if missing:
        raise ProtocolError(f"topic template {template!r} needs {', '.join(missing)}")
    name = template.format_map(values)
    if not _LEGAL.fullmatch(name) or name in {".", ".."}:
        raise ProtocolError(
            f"topic name {name!r} from template {template!r} is not a legal Kafka topic name"
        )
    return name


def per_table(template: str) -> bool:
    """Whether `template` spreads a source over several topics (uses {schema} or {table})."""
    return bool(_placeholders(template) & {"schema", "table"})


def checkpoint_key(source: str) -> bytes:
    """Key of a ReaderCheckpoint: the source name, UTF-8."""
    return source.encode("utf-8")


def fragment_key(source: str) -> bytes:
    """Key of the fragment record of a source's transaction published in fragments (§9.1):
    the source name, ``/fragment``, UTF-8."""
    return f"{source}/fragment".encode()


def table_state_key(source: str, schema: str, table: str) -> bytes:
    """Key of a reader's tracked table state on the checkpoints topic (PROTOCOL.md §7):
    ``{source}/table/`` and the backquoted ``schema`.`table``, UTF-8."""
    quoted = ".".join("`" + n.replace("`", "``") + "`" for n in (schema, table))
    return f"{source}/table/{quoted}".encode()


def schema_key(schema_id: int) -> bytes:
    """Key of a SchemaRecord: the schema id in decimal ASCII."""
    return str(schema_id).encode("ascii")


def control_key(lock_id: str) -> bytes:
    """Key of a ControlRecord: the lock id, UTF-8."""
    return lock_id.encode("utf-8")
