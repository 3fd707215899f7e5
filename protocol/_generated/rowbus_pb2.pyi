from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_UNSPECIFIED: _ClassVar[Op]
    OP_INSERT: _ClassVar[Op]
    OP_UPDATE: _ClassVar[Op]
    OP_DELETE: _ClassVar[Op]
    OP_READ: _ClassVar[Op]
OP_UNSPECIFIED: Op
OP_INSERT: Op
OP_UPDATE: Op
OP_DELETE: Op
OP_READ: Op

class Position(_message.Message):
    __slots__ = ("file", "offset", "gtid", "upstream")
    FILE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    GTID_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    file: str
    offset: int
    gtid: str
    upstream: int
    def __init__(self, file: _Optional[str] = ..., offset: _Optional[int] = ..., gtid: _Optional[str] = ..., upstream: _Optional[int] = ...) -> None: ...

class Txn(_message.Message):
    __slots__ = ("id", "index", "count")
    ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    index: int
    count: int
    def __init__(self, id: _Optional[str] = ..., index: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("kinds", "ints", "uints", "doubles", "strings", "blobs")
    KINDS_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    UINTS_FIELD_NUMBER: _ClassVar[int]
    DOUBLES_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    kinds: bytes
    ints: _containers.RepeatedScalarFieldContainer[int]
    uints: _containers.RepeatedScalarFieldContainer[int]
    doubles: _containers.RepeatedScalarFieldContainer[float]
    strings: _containers.RepeatedScalarFieldContainer[str]
    blobs: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, kinds: _Optional[bytes] = ..., ints: _Optional[_Iterable[int]] = ..., uints: _Optional[_Iterable[int]] = ..., doubles: _Optional[_Iterable[float]] = ..., strings: _Optional[_Iterable[str]] = ..., blobs: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RowChange(_message.Message):
    __slots__ = ("source", "ts", "op", "schema", "table", "schema_id", "primary_key", "before", "after", "txn", "position")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    source: str
    ts: int
    op: Op
    schema: str
    table: str
    schema_id: int
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    before: Image
    after: Image
    txn: Txn
    position: Position
    def __init__(self, source: _Optional[str] = ..., ts: _Optional[int] = ..., op: _Optional[_Union[Op, str]] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., schema_id: _Optional[int] = ..., primary_key: _Optional[_Iterable[str]] = ..., before: _Optional[_Union[Image, _Mapping]] = ..., after: _Optional[_Union[Image, _Mapping]] = ..., txn: _Optional[_Union[Txn, _Mapping]] = ..., position: _Optional[_Union[Position, _Mapping]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "type", "unsigned", "nullable", "length", "precision", "scale", "fsp", "charset", "elements", "default_value", "collation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UNSIGNED_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    FSP_FIELD_NUMBER: _ClassVar[int]
    CHARSET_FIELD_NUMBER: _ClassVar[int]
    ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    COLLATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    unsigned: bool
    nullable: bool
    length: int
    precision: int
    scale: int
    fsp: int
    charset: str
    elements: _containers.RepeatedScalarFieldContainer[str]
    default_value: str
    collation: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., unsigned: _Optional[bool] = ..., nullable: _Optional[bool] = ..., length: _Optional[int] = ..., precision: _Optional[int] = ..., scale: _Optional[int] = ..., fsp: _Optional[int] = ..., charset: _Optional[str] = ..., elements: _Optional[_Iterable[str]] = ..., default_value: _Optional[str] = ..., collation: _Optional[str] = ...) -> None: ...

class Index(_message.Message):
    __slots__ = ("name", "columns", "unique")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    columns: _containers.RepeatedScalarFieldContainer[str]
    unique: bool
    def __init__(self, name: _Optional[str] = ..., columns: _Optional[_Iterable[str]] = ..., unique: _Optional[bool] = ...) -> None: ...

class TableSchema(_message.Message):
    __slots__ = ("schema", "table", "columns", "primary_key", "indexes")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    indexes: _containers.RepeatedCompositeFieldContainer[Index]
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., primary_key: _Optional[_Iterable[str]] = ..., indexes: _Optional[_Iterable[_Union[Index, _Mapping]]] = ...) -> None: ...

class DdlChange(_message.Message):
    __slots__ = ("source", "ts", "schema", "table", "statement", "table_schema", "position", "txn", "kind", "sql_mode", "timestamp_us", "time_zone")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    TABLE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SQL_MODE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_US_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    source: str
    ts: int
    schema: str
    table: str
    statement: str
    table_schema: TableSchema
    position: Position
    txn: Txn
    kind: str
    sql_mode: str
    timestamp_us: int
    time_zone: str
    def __init__(self, source: _Optional[str] = ..., ts: _Optional[int] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., statement: _Optional[str] = ..., table_schema: _Optional[_Union[TableSchema, _Mapping]] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., txn: _Optional[_Union[Txn, _Mapping]] = ..., kind: _Optional[str] = ..., sql_mode: _Optional[str] = ..., timestamp_us: _Optional[int] = ..., time_zone: _Optional[str] = ...) -> None: ...

class Resolved(_message.Message):
    __slots__ = ("source", "ts")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    source: str
    ts: int
    def __init__(self, source: _Optional[str] = ..., ts: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("source", "ts", "reader_id", "position", "lag_ms")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    READER_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    source: str
    ts: int
    reader_id: str
    position: Position
    lag_ms: int
    def __init__(self, source: _Optional[str] = ..., ts: _Optional[int] = ..., reader_id: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., lag_ms: _Optional[int] = ...) -> None: ...

class SchemaRecord(_message.Message):
    __slots__ = ("schema_id", "table_schema", "source", "ts")
    SCHEMA_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    schema_id: int
    table_schema: TableSchema
    source: str
    ts: int
    def __init__(self, schema_id: _Optional[int] = ..., table_schema: _Optional[_Union[TableSchema, _Mapping]] = ..., source: _Optional[str] = ..., ts: _Optional[int] = ...) -> None: ...

class TopicOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ReaderCheckpoint(_message.Message):
    __slots__ = ("source", "position", "gtid_set", "ts", "offsets", "reader_id", "epoch", "upstream_server", "snapshot")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    GTID_SET_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    READER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_SERVER_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    source: str
    position: Position
    gtid_set: str
    ts: int
    offsets: _containers.RepeatedCompositeFieldContainer[TopicOffset]
    reader_id: str
    epoch: int
    upstream_server: str
    snapshot: str
    def __init__(self, source: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., gtid_set: _Optional[str] = ..., ts: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[TopicOffset, _Mapping]]] = ..., reader_id: _Optional[str] = ..., epoch: _Optional[int] = ..., upstream_server: _Optional[str] = ..., snapshot: _Optional[str] = ...) -> None: ...

class ControlRecord(_message.Message):
    __slots__ = ("lock_id", "kind", "shard", "statement", "ts", "actor", "detail")
    LOCK_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    lock_id: str
    kind: str
    shard: str
    statement: str
    ts: int
    actor: str
    detail: str
    def __init__(self, lock_id: _Optional[str] = ..., kind: _Optional[str] = ..., shard: _Optional[str] = ..., statement: _Optional[str] = ..., ts: _Optional[int] = ..., actor: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class SnapshotMarker(_message.Message):
    __slots__ = ("source", "ts", "schema", "table", "snapshot", "mode", "position", "txn", "rows")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TXN_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    source: str
    ts: int
    schema: str
    table: str
    snapshot: str
    mode: str
    position: Position
    txn: Txn
    rows: int
    def __init__(self, source: _Optional[str] = ..., ts: _Optional[int] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., snapshot: _Optional[str] = ..., mode: _Optional[str] = ..., position: _Optional[_Union[Position, _Mapping]] = ..., txn: _Optional[_Union[Txn, _Mapping]] = ..., rows: _Optional[int] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("row", "ddl", "resolved", "heartbeat", "schema", "checkpoint", "control", "snapshot_begin", "snapshot_end", "crc")
    ROW_FIELD_NUMBER: _ClassVar[int]
    DDL_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BEGIN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_END_FIELD_NUMBER: _ClassVar[int]
    CRC_FIELD_NUMBER: _ClassVar[int]
    row: RowChange
    ddl: DdlChange
    resolved: Resolved
    heartbeat: Heartbeat
    schema: SchemaRecord
    checkpoint: ReaderCheckpoint
    control: ControlRecord
    snapshot_begin: SnapshotMarker
    snapshot_end: SnapshotMarker
    crc: int
    def __init__(self, row: _Optional[_Union[RowChange, _Mapping]] = ..., ddl: _Optional[_Union[DdlChange, _Mapping]] = ..., resolved: _Optional[_Union[Resolved, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., schema: _Optional[_Union[SchemaRecord, _Mapping]] = ..., checkpoint: _Optional[_Union[ReaderCheckpoint, _Mapping]] = ..., control: _Optional[_Union[ControlRecord, _Mapping]] = ..., snapshot_begin: _Optional[_Union[SnapshotMarker, _Mapping]] = ..., snapshot_end: _Optional[_Union[SnapshotMarker, _Mapping]] = ..., crc: _Optional[int] = ...) -> None: ...
