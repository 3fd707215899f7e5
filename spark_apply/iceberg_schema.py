"""An Iceberg table's schema for a routed table: its layout, its columns per form, their
evolution after a DDL (moved out of `iceberg_sink.IcebergTables`, which writes the rows).

`layout` projects an upstream table schema onto its target with each column's Iceberg kind
and converter (`iceberg_types`); `schema_of` is the schema a new table of a form gets;
`evolve_table` brings an existing table to a layout: ADD COLUMN, DROP COLUMN (the change log
keeps the column), widening int→long, float→double, decimal precision, and anything else
refused in one line (`iceberg_types.IcebergError`) before any of it is applied.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from rowbus.protocol.events import ColumnSchema, TableSchema
from rowbus.routing.routes import Projection, Target
from rowbus.spark_apply.iceberg_types import Converter, IcebergError, Kind, converter, kind_of

log = logging.getLogger(__name__)

META = (
    ("_op", "string"),
    ("_ts", "long"),
    ("_source", "string"),
    ("_binlog_file", "string"),
    ("_binlog_offset", "long"),
    ("_gtid", "string"),
    ("_txn_id", "string"),
    ("_txn_index", "int"),
    ("_topic", "string"),
    ("_partition", "int"),
    ("_offset", "long"),
)
"""The change log's own columns, before the images."""
WIDENING = {("int", "long"), ("float", "double")}


@dataclass(frozen=True, slots=True)
class Layout:
    """One upstream table schema projected onto its target: the columns kept, their kinds,
    their converters, the key."""

    target: Target
    projection: Projection
    columns: tuple[ColumnSchema, ...]
    kinds: tuple[Kind, ...]
    converters: tuple[Converter, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.projection.columns

    @property
    def key(self) -> tuple[str, ...]:
        return self.projection.key_columns


def layout(proj: Projection, table: TableSchema, null_zero_dates: bool) -> Layout:
    """The layout of `table` as `proj` routes it, or UnstorableColumnError in one line."""
    columns = tuple(table.columns[i] for i in proj.indexes)
    where = table.qualified
    kinds = tuple(kind_of(where, c) for c in columns)
    convs = tuple(
        converter(where, c, k, null_zero_dates) for c, k in zip(columns, kinds, strict=True)
    )
    return Layout(proj.target, proj, columns, kinds, convs)


def wanted_columns(lay: Layout, changelog: bool) -> list[tuple[str, Kind, bool]]:
    """(name, kind, required) of each column the table of this form should have."""
    if changelog:
        meta = [(n, Kind(t), False) for n, t in META]
        images = [
            (f"{side}_{c.name}", k, False)
            for side in ("before", "after")
            for c, k in zip(lay.columns, lay.kinds, strict=True)
        ]
        return meta + images
    key = set(lay.key)
    return [(c.name, k, c.name in key) for c, k in zip(lay.columns, lay.kinds, strict=True)]


def schema_of(lay: Layout, changelog: bool) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    wanted = wanted_columns(lay, changelog)
    fields = [
        NestedField(field_id=i, name=n, field_type=k.iceberg(), required=r)
        for i, (n, k, r) in enumerate(wanted, 1)
    ]
    key = [] if changelog else [i for i, (n, _, _) in enumerate(wanted, 1) if n in lay.key]
    return Schema(*fields, identifier_field_ids=key)


def evolve_table(catalog: Any, table: Any, lay: Layout, changelog: bool, name: str) -> Any:
    """Bring `table` to `lay`'s columns: add the new, drop the gone, widen what Iceberg
    widens; anything else refused in one line before any of it is applied."""
    from pyiceberg.types import DecimalType

    current = {f.name: f for f in table.schema().fields}
    wanted = wanted_columns(lay, changelog)
    names = {n for n, _, _ in wanted}
    adds, widen = [], []
    for n, kind, _ in wanted:
        have = current.get(n)
        if have is None:
            adds.append((n, kind))
            continue
        want = kind.iceberg()
        if have.field_type == want:
            continue
        old, new = str(have.field_type), str(want)
        decimal_wider = (
            isinstance(have.field_type, DecimalType)
            and isinstance(want, DecimalType)
            and want.scale == have.field_type.scale
            and want.precision > have.field_type.precision
        )
        if (old, new) not in WIDENING and not decimal_wider:
            raise IcebergError(
                f"{name}.{n} would change from {old} to {new}, which Iceberg cannot do in "
                "place: only int→long, float→double and a wider decimal precision are "
                "applied; recreate the Iceberg table (drop it and replay), or route the "
                "column out"
            )
        widen.append((n, want))
    # The change log keeps a dropped column (NULL from then on): its history stays.
    drops = [] if changelog else [n for n in current if n not in names]
    if not changelog:
        key_ids = [current[k].field_id for k in lay.key if k in current]
        if sorted(key_ids) != sorted(table.schema().identifier_field_ids) or len(key_ids) != len(
            lay.key
        ):
            raise IcebergError(
                f"{name}: the primary key would become {list(lay.key)}, which the sink "
                "does not change in an Iceberg table yet: recreate the Iceberg table"
            )
    if adds and drops:
        raise IcebergError(
            f"{name}: columns {drops} would go and {[n for n, _ in adds]} come in one "
            "change, which may be a RENAME (Iceberg would lose the old rows' values): "
            "the sink does not apply it; rename the Iceberg column by hand, or recreate "
            "the table"
        )
    if not (adds or widen or drops):
        return table
    with table.update_schema() as update:
        for n, kind in adds:
            update.add_column(n, kind.iceberg())
        for n, want in widen:
            update.update_column(n, field_type=want)
        for n in drops:
            update.delete_column(n)
    log.info("evolved %s: added %s, widened %s, dropped %s", name, adds, widen, drops)
    return catalog.load_table(table.name())
