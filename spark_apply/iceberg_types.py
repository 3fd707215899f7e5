"""MySQL/MariaDB column types → Iceberg types, and protocol values → Arrow columns of them.

The one mapping of the Iceberg sink (its table: spark_apply README, "The sink, first slice",
Types). Every type the protocol carries maps to an Iceberg type that
holds each of its values exactly, or is refused (`UnstorableColumnError`) before Spark starts, in
one line naming the table, the column and what to change:

- BIGINT UNSIGNED and BIT(64) → ``decimal(20, 0)`` (no unsigned long in Iceberg);
- DECIMAL(p, s) with p > 38 → refused (Iceberg's precision ends at 38; a string would change
  the column's type behind the user's back): change the column, or leave it out of the route;
- TIME → ``long``, the signed microseconds the protocol carries (negative TIMEs included;
  Iceberg's ``time`` is a time of day, 00:00 to 24:00);
- SET → ``string``: the members in the column's definition order joined by ``,`` (as MySQL
  prints it); ENUM, JSON and every character set → ``string`` (Unicode, as the protocol
  carries them); GEOMETRY → ``binary`` (the WKB the protocol carries);
- a zero date (a value, not a type: ``0000-00-00``) → refused at its row, or NULL by choice
  (`IcebergSettings.zero_dates`).

Pure: no catalog, no I/O. pyiceberg and pyarrow are imported lazily (only the Iceberg sink
needs them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rowbus.protocol.events import ColumnSchema
from rowbus.protocol.values import Value, ZeroDate
from rowbus.spark_apply.exceptions import ApplyError

MAX_DECIMAL_PRECISION = 38

_INT32 = frozenset({"tinyint", "smallint", "mediumint", "year"})
_STRINGS = frozenset(
    {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "json"}
)
_BYTES = frozenset(
    {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry"}
)


class UnstorableColumnError(ApplyError):
    """A column whose values no Iceberg type holds exactly."""


class ZeroDateError(ApplyError):
    """A zero date met with ``iceberg.zero_dates: refuse``."""


class IcebergError(ApplyError):
    """The catalog or a table refused a write, or a change Iceberg cannot express."""


@dataclass(frozen=True, slots=True)
class Kind:
    """How one column is stored: its Iceberg type (`iceberg`), its Arrow type (`arrow`) and
    the conversion of a protocol value into what that Arrow type takes (`convert`)."""

    name: str
    """The Iceberg type's text (``long``, ``decimal(20, 0)``): what widening compares."""
    precision: int = 0
    scale: int = 0

    def iceberg(self) -> Any:
        from pyiceberg import types as t

        simple: dict[str, Any] = {
            "int": t.IntegerType(),
            "long": t.LongType(),
            "float": t.FloatType(),
            "double": t.DoubleType(),
            "string": t.StringType(),
            "binary": t.BinaryType(),
            "date": t.DateType(),
            "timestamp": t.TimestampType(),
            "timestamptz": t.TimestamptzType(),
        }
        if self.name == "decimal":
            return t.DecimalType(self.precision, self.scale)
        return simple[self.name]


def kind_of(table: str, column: ColumnSchema) -> Kind:
    """The Iceberg kind of `column` of `table`, or UnstorableColumnError in one line."""
    name = column.type.lower()
    if name in _INT32 or (name == "int" and not column.unsigned):
        return Kind("int")
    if name == "int" or (name == "bigint" and not column.unsigned):
        return Kind("long")
    if name == "bigint" or (name == "bit" and (column.length or 64) > 63):
        return Kind("decimal", 20, 0)
    if name == "bit":
        return Kind("long")
    if name in ("float", "double"):
        return Kind(name)
    if name == "decimal":
        precision, scale = column.precision or 10, column.scale or 0
        if precision > MAX_DECIMAL_PRECISION:
            raise UnstorableColumnError(
                f"{table}.{column.name} is DECIMAL({precision},{scale}), beyond Iceberg's "
                f"precision {MAX_DECIMAL_PRECISION}: change it to DECIMAL(38,{min(scale, 38)}) "
                "upstream, or leave the column out of the route (exclude)"
            )
        return Kind("decimal", precision, scale)
    if name in _STRINGS or name == "set":
        return Kind("string")
    if name in _BYTES:
        return Kind("binary")
    if name in ("date", "datetime", "timestamp"):
        return Kind(
            "timestamptz" if name == "timestamp" else "timestamp" if name == "datetime" else "date"
        )
    if name == "time":
        return Kind("long")
    raise UnstorableColumnError(
        f"{table}.{column.name} has type {column.type}, which the Iceberg sink does not map: "
        "leave the column out of the route (exclude), or the table out of the job"
    )


def arrow_type(kind: Kind) -> Any:
    import pyarrow as pa

    types: dict[str, Any] = {
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.large_string(),
        "binary": pa.large_binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    if kind.name == "decimal":
        return pa.decimal128(kind.precision, kind.scale)
    return types[kind.name]


Converter = Callable[[Value], Any]


def converter(table: str, column: ColumnSchema, kind: Kind, null_zero_dates: bool) -> Converter:
    """The function turning one protocol value of `column` into its Arrow input (None stays
    None). A zero date raises ZeroDateError unless `null_zero_dates`."""
    name = column.type.lower()

    def zero(value: Value) -> Any:
        if null_zero_dates:
            return None
        raise ZeroDateError(
            f"{table}.{column.name} holds the zero date {value.text!r} (a {column.type}), "  # type: ignore[union-attr]
            "which no Iceberg date holds: set apply.iceberg.zero_dates: null to store NULL, "
            "or fix the value upstream"
        )

    if name == "set":
        order = {m: i for i, m in enumerate(column.elements)}

        def set_text(value: Value) -> Any:
            if value is None:
                return None
            assert isinstance(value, frozenset)
            return ",".join(sorted(value, key=lambda m: (order.get(m, len(order)), m)))

        return set_text
    if name == "time":

        def micros(value: Value) -> Any:
            if value is None:
                return None
            assert isinstance(value, dt.timedelta)
            return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds

        return micros
    if name in ("date", "datetime", "timestamp"):
        return lambda v: zero(v) if isinstance(v, ZeroDate) else v
    if kind.name == "decimal" and name != "decimal":
        return lambda v: None if v is None else Decimal(v)  # type: ignore[arg-type]
    return _same


def _same(value: Value) -> Any:
    return value


def column_arrays(
    kinds: Sequence[Kind], converters: Sequence[Converter], rows: Sequence[Sequence[Value]]
) -> list[Any]:
    """Arrow arrays, one per column, of `rows` (each a projected image)."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [() for _ in kinds]
    return [
        pa.array([conv(v) for v in col], type=arrow_type(kind))
        for col, kind, conv in zip(columns, kinds, converters, strict=True)
    ]
