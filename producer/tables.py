"""Table schemas from the binlog's table map (FULL row metadata), and per-table value converters.

Values are decoded by `rowbus.producer.values` (our own value layer where mysql-replication is
wrong); `converter_for` only makes the library's ``{column: value}`` dict positional.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from rowbus.protocol.events import ColumnSchema, TableSchema
from rowbus.protocol.values import Value

log = logging.getLogger(__name__)

_BLOB_SIZES = {1: "tiny", 2: "", 3: "medium", 4: "long"}
_SIMPLE = {
    FIELD_TYPE.TINY: "tinyint",
    FIELD_TYPE.SHORT: "smallint",
    FIELD_TYPE.INT24: "mediumint",
    FIELD_TYPE.LONG: "int",
    FIELD_TYPE.LONGLONG: "bigint",
    FIELD_TYPE.FLOAT: "float",
    FIELD_TYPE.DOUBLE: "double",
    FIELD_TYPE.NEWDECIMAL: "decimal",
    FIELD_TYPE.DATE: "date",
    FIELD_TYPE.NEWDATE: "date",
    FIELD_TYPE.YEAR: "year",
    FIELD_TYPE.DATETIME2: "datetime",
    FIELD_TYPE.DATETIME: "datetime",
    FIELD_TYPE.TIMESTAMP2: "timestamp",
    FIELD_TYPE.TIMESTAMP: "timestamp",
    FIELD_TYPE.TIME2: "time",
    FIELD_TYPE.TIME: "time",
    FIELD_TYPE.BIT: "bit",
    FIELD_TYPE.ENUM: "enum",
    FIELD_TYPE.SET: "set",
    FIELD_TYPE.JSON: "json",
    FIELD_TYPE.GEOMETRY: "geometry",
}


class MissingMetadataError(ValueError):
    """The table map carries no column names: the server lacks binlog_row_metadata=FULL."""


def _charset(col: Any) -> str | None:
    collation = getattr(col, "collation_name", None)
    if not collation:
        return None
    return "binary" if collation == "binary" else str(collation).split("_", 1)[0]


def _type_name(col: Any, charset: str | None) -> str:
    code = col.type
    binary = charset == "binary"
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING):
        return "varbinary" if binary else "varchar"
    if code == FIELD_TYPE.STRING:
        return "binary" if binary else "char"
    if code == FIELD_TYPE.BLOB:
        size = _BLOB_SIZES.get(getattr(col, "length_size", 2), "")
        return f"{size}blob" if binary else f"{size}text"
    return _SIMPLE.get(code, f"type{code}")


_MBMAXLEN = {
    "utf8mb4": 4,
    "utf16": 4,
    "utf16le": 4,
    "utf32": 4,
    "utf8mb3": 3,
    "utf8": 3,
    "ujis": 3,
    "eucjpms": 3,
    "ucs2": 2,
    "big5": 2,
    "gbk": 2,
    "gb2312": 2,
    "sjis": 2,
    "cp932": 2,
    "euckr": 2,
}
CHAR_TYPES = ("char", "varchar", "binary", "varbinary")
"""Types whose `length` is the declared length: characters (bytes for the binary ones)."""


def _char_length(col: Any, charset: str | None) -> int | None:
    """CHAR/VARCHAR(n): the table map holds the maximum bytes; n is that over the charset's
    maximum bytes per character (1 for binary and single-byte charsets)."""
    max_bytes = getattr(col, "max_length", None)
    if not isinstance(max_bytes, int):
        return None
    return max_bytes // _MBMAXLEN.get(charset or "binary", 1)


def column_schema(col: Any, nullable: bool) -> ColumnSchema:
    """One `ColumnSchema` from a mysql-replication `Column` parsed with FULL metadata."""
    if not col.name:
        raise MissingMetadataError("column without a name in the table map")
    charset = _charset(col)
    name = _type_name(col, charset)
    elements: tuple[str, ...] = ()
    if name == "enum" and col.enum_values:
        # mysql-replication puts the "invalid value" '' in front of the members.
        elements = tuple(col.enum_values[1:])
    elif name == "set" and col.set_values:
        elements = tuple(col.set_values)
    return ColumnSchema(
        name=str(col.name),
        type=name,
        # YEAR is unsigned on both servers; MySQL leaves it out of the signedness bitmap.
        unsigned=bool(col.unsigned) or name == "year",
        nullable=nullable,
        length=getattr(col, "bits", None)
        if name == "bit"
        else (_char_length(col, charset) if name in CHAR_TYPES else None),
        precision=getattr(col, "precision", None) if name == "decimal" else None,
        scale=getattr(col, "decimals", None) if name == "decimal" else None,
        fsp=getattr(col, "fsp", None) if name in ("datetime", "timestamp", "time") else None,
        charset=charset if charset != "binary" else None,
        elements=elements,
        collation=str(col.collation_name)
        if charset not in (None, "binary") and getattr(col, "collation_name", None)
        else None,
    )


def _null_bits(null_bitmask: bytes, count: int) -> list[bool]:
    return [bool(null_bitmask[i >> 3] & (1 << (i & 7))) for i in range(count)]


def table_schema_from_map(event: Any) -> TableSchema:
    """The `TableSchema` a parsed `TableMapEvent` describes (needs FULL row metadata)."""
    columns = event.columns
    nullable = _null_bits(bytes(event.null_bitmask), len(columns))
    cols = tuple(column_schema(c, n) for c, n in zip(columns, nullable, strict=True))
    meta = getattr(event, "optional_metadata", None)
    # Key order: the library's table object lists key columns in column order.
    order = list(getattr(meta, "simple_primary_key_list", None) or ()) or list(
        getattr(meta, "primary_keys_with_prefix", None) or {}
    )
    pk = event.table_obj.primary_key
    primary_key: tuple[str, ...]
    if order and all(0 <= i < len(cols) for i in order):
        primary_key = tuple(cols[i].name for i in order)
    elif not pk:
        primary_key = ()
    elif isinstance(pk, str):
        primary_key = (pk,)
    else:
        primary_key = tuple(pk)
    return TableSchema(str(event.schema), str(event.table), cols, primary_key)


Converter = Callable[[Mapping[str, Any]], tuple[Value, ...]]


def converter_for(table: TableSchema) -> Converter:
    """A function turning the decoded ``{column: value}`` dict into a positional image.

    The values are already protocol values: `rowbus.producer.values` decodes every column type
    the library gets wrong, so nothing is fixed afterwards."""
    del table  # one converter for every layout, kept per layout for the callers' caches
    return lambda values: tuple(values.values())


class TableFilter:
    """Which ``schema.table`` the reader publishes (fnmatch patterns, cached per name)."""

    def __init__(
        self,
        include_schemas: Sequence[str] = (),
        exclude_schemas: Sequence[str] = (),
        include_tables: Sequence[str] = (),
        exclude_tables: Sequence[str] = (),
        system_schemas: Iterable[str] = (),
        tool_table: Callable[[str], bool] | None = None,
    ) -> None:
        self._inc_s = tuple(include_schemas)
        self._exc_s = (*exclude_schemas, *system_schemas)
        self._inc_t = tuple(include_tables)
        self._exc_t = tuple(exclude_tables)
        self._tool_table = tool_table
        """Online schema change tools' tables (`rowbus.producer.online_ddl`), never wanted."""
        self._cache: dict[tuple[str, str | None], bool] = {}

    def _match(self, name: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    def schema_wanted(self, schema: str) -> bool:
        return self.wanted(schema, None)

    def wanted(self, schema: str, table: str | None) -> bool:
        key = (schema, table)
        found = self._cache.get(key)
        if found is None:
            found = not self._match(schema, self._exc_s) and (
                not self._inc_s or self._match(schema, self._inc_s)
            )
            if found and table is not None:
                qualified = f"{schema}.{table}"
                found = not self._match(qualified, self._exc_t) and (
                    not self._inc_t or self._match(qualified, self._inc_t)
                )
                if found and self._tool_table is not None and self._tool_table(table):
                    found = False
                    # A warning: a table of the user's named so would otherwise vanish quietly.
                    log.warning(
                        "%s is named like an online schema change tool's table: neither its "
                        "rows nor its DDL are published (reader.online_ddl; set it false if "
                        "it is a table of yours)",
                        qualified,
                    )
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = found
        return found
