"""The rowbus open protocol: event model, values, codecs, partitioner and topics.

This package imports no I/O library; PROTOCOL.md in this folder is the specification.

    from rowbus.protocol import RowChange, encode, decode, Encoding
    value, headers = encode(row)                     # protobuf by default
    event = decode(value, headers, "rowbus.db1[3]@42")

- `events`: the event model (frozen dataclasses for every record on Kafka);
- `values`: the Python value domain, one type per wire kind;
- `codec`: the encodings (protobuf, Avro, JSON), headers and their decoding;
- `debezium`: rows rendered as Debezium's MySQL connector writes them (encoding ``debezium``);
- `debezium_columns`: one column as Debezium renders it (Connect schema, values, default);
- `debezium_history`: Debezium's schema-change records, with their ``tableChanges``;
- `partition`: message keys and the Java-compatible partitioner;
- `topics`: topic names, system-topic keys and recommended configs;
- `hlc`: the per-source hybrid logical clock;
- `positions`: GTIDs, GTID sets and the one start-position grammar;
- `ddl`: the one DDL parser (classify a statement, the tables it touches, retarget it);
- `errors`: `RowbusError`, the root of every rowbus exception, and `ProtocolError`;
- `golden`: the golden vectors of `testdata/`;
- `conformance`: the conformance kit, which checks any program's decoder and merger against
  the vectors over JSON lines (PROTOCOL.md §10);
- `regenerate`: rebuilds `_generated/` from `rowbus.proto`.

Depends on: no other component.
"""

from rowbus.protocol.codec import (
    ENCODING_HEADER,
    KIND_HEADER,
    PROTOCOL_VERSION,
    VERSION_HEADER,
    Encoding,
    decode,
    encode,
    kind_name,
)
from rowbus.protocol.errors import ProtocolError, RowbusError
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    ControlKind,
    ControlRecord,
    DdlChange,
    Event,
    Heartbeat,
    MarkerMode,
    Op,
    ReaderCheckpoint,
    Record,
    Resolved,
    RowChange,
    SchemaRecord,
    SnapshotBegin,
    SnapshotEnd,
    SnapshotMarker,
    SnapshotMarkerFields,
    TableSchema,
    TxnRef,
    order_key,
    snapshot_marker,
)
from rowbus.protocol.hlc import HybridClock
from rowbus.protocol.partition import (
    Dispatch,
    DispatchRule,
    Partitioner,
    encode_key,
    java_partition,
)
from rowbus.protocol.topics import CHECKPOINTS_TOPIC, CONTROL_TOPIC, SCHEMAS_TOPIC, data_topic
from rowbus.protocol.values import Value, ZeroDate

__all__ = [
    "CHECKPOINTS_TOPIC",
    "CONTROL_TOPIC",
    "ENCODING_HEADER",
    "KIND_HEADER",
    "PROTOCOL_VERSION",
    "SCHEMAS_TOPIC",
    "VERSION_HEADER",
    "BinlogPosition",
    "ColumnSchema",
    "ControlKind",
    "ControlRecord",
    "DdlChange",
    "Dispatch",
    "DispatchRule",
    "Encoding",
    "Event",
    "Heartbeat",
    "HybridClock",
    "MarkerMode",
    "Op",
    "Partitioner",
    "ProtocolError",
    "ReaderCheckpoint",
    "Record",
    "Resolved",
    "RowChange",
    "RowbusError",
    "SchemaRecord",
    "SnapshotBegin",
    "SnapshotEnd",
    "SnapshotMarker",
    "SnapshotMarkerFields",
    "TableSchema",
    "TxnRef",
    "Value",
    "ZeroDate",
    "data_topic",
    "decode",
    "encode",
    "encode_key",
    "java_partition",
    "kind_name",
    "order_key",
    "snapshot_marker",
]
