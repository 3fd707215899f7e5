"""An Iceberg table's schema for a routed table: its layout, its columns per form, their
evolution after a DDL (moved out of `iceberg_sink.IcebergTables`, which writes the rows).

`layout` projects an upstream table schema onto its target with each column's Iceberg kind
and converter (`iceberg_types`); `schema_of` is the schema a new table of a form gets;
`evolve_table` brings an existing table to a layout in one schema commit: RENAME COLUMN (the
statement's renames), ADD COLUMN (a constant DEFAULT as Iceberg's initial default:
`initial_default`), DROP COLUMN (the change log keeps the column), widening int→long,
float→double, decimal precision, a new primary key (identifier fields), and anything else
refused in one line (`iceberg_types.IcebergError`) before any of it is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
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


def initial_default(name: str, column: ColumnSchema, kind: Kind) -> Any:
    """The value an added column of the current state reads in rows written before it: its
    DEFAULT when a constant (Iceberg's initial default), None without one; an expression
    (``current_timestamp()``) refused in one line — old rows would read NULL, not the value
    the source gave them."""
    from pyiceberg.expressions.literals import literal

    text = column.default
    if text is None or text.upper() == "NULL":
        return None
    try:
        if text.startswith("'") and text.endswith("'") and len(text) >= 2:
            value: Any = text[1:-1].replace("''", "'").replace("\\\\", "\\")
        elif kind.name in ("int", "long"):
            value = int(text)
        elif kind.name in ("float", "double"):
            value = float(text)
        else:
            value = Decimal(text)
        # what pyiceberg's add_column does with it, here: a refusal before any change
        literal(value).to(kind.iceberg())
    except (ValueError, TypeError, ArithmeticError):
        raise IcebergError(
            f"{name}.{column.name} is added with DEFAULT {text}, which Iceberg cannot give "
            "the rows written before it as an initial default (an expression, or a value "
            "of another type): add the column without that DEFAULT upstream, or route the "
            "table out of the Iceberg job"
        ) from None
    return value


def evolve_table(
    catalog: Any,
    table: Any,
    lay: Layout,
    changelog: bool,
    name: str,
    renames: Mapping[str, str] | None = None,
) -> Any:
    """Bring `table` to `lay`'s columns in one schema commit: rename what `renames` (old →
    new, from the statement) names, add the new (the current state with their constant
    DEFAULT as initial default), drop the gone, widen what Iceberg widens, move the identifier
    fields to a new primary key; anything else refused in one line before any of it is
    applied."""
    from pyiceberg.types import DecimalType

    schema = table.schema()
    fields = {f.name: f for f in schema.fields}
    # Each rename as the table's columns spell it (the change log: both images).
    renamed: dict[str, str] = {}
    for old, new in (renames or {}).items():
        for prefix in ("before_", "after_") if changelog else ("",):
            if prefix + old in fields and prefix + new not in fields:
                renamed[prefix + old] = prefix + new
    current = {renamed.get(n, n): f for n, f in fields.items()}
    wanted = wanted_columns(lay, changelog)
    names = {n for n, _, _ in wanted}
    by_name = {c.name: (c, k) for c, k in zip(lay.columns, lay.kinds, strict=True)}
    adds, widen = [], []
    for n, kind, _ in wanted:
        have = current.get(n)
        if have is None:
            default = None if changelog else initial_default(name, *by_name[n])
            adds.append((n, kind, default))
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
                "place: only int→long, float→double and a wider decimal precision (same "
                "scale) are applied; recreate the Iceberg table (drop it and replay), or "
                "route the table out of the Iceberg job"
            )
        widen.append((have.name, want))
    # The change log keeps a dropped column (NULL from then on): its history stays.
    drops = [] if changelog else [current[n].name for n in current if n not in names]
    new_key: list[str] = []
    if not changelog:
        key_ids = sorted(current[k].field_id for k in lay.key if k in current)
        if key_ids != sorted(schema.identifier_field_ids) or len(key_ids) != len(lay.key):
            if len(key_ids) != len(lay.key):
                raise IcebergError(
                    f"{name}: the primary key would become {list(lay.key)}, with a column "
                    "added in the same change, which Iceberg's identifier fields cannot "
                    "take: add the column first, then change the key upstream, or recreate "
                    "the Iceberg table"
                )
            new_key = list(lay.key)
    if adds and drops:
        raise IcebergError(
            f"{name}: columns {drops} would go and {[n for n, _, _ in adds]} come in one "
            "change that names no column rename, which may be a RENAME (Iceberg would lose "
            "the old rows' values): the sink does not apply it; rename the column with "
            "RENAME COLUMN or CHANGE upstream, or recreate the Iceberg table"
        )
    if not (renamed or adds or widen or drops or new_key):
        return table
    _commit(table, name, renamed, adds, widen, drops, [current[k] for k in new_key])
    log.info(
        "evolved %s: renamed %s, added %s, widened %s, dropped %s, key %s",
        name,
        renamed,
        [n for n, _, _ in adds],
        widen,
        drops,
        new_key or "unchanged",
    )
    return catalog.load_table(table.name())


def _commit(
    table: Any,
    name: str,
    renamed: Mapping[str, str],
    adds: list[tuple[str, Kind, Any]],
    widen: list[tuple[str, Any]],
    drops: list[str],
    new_key: list[Any],
) -> None:
    """One schema commit of `evolve_table`'s changes (`new_key`: the new key's fields as the
    table has them before the renames), or none of it: pyiceberg's own refusal in one line."""
    # A new key's columns become required (MySQL's key columns are NOT NULL, so every
    # row has them): an incompatible change by Iceberg's rules, allowed only then.
    try:
        # Nothing is committed when a call below raises (pyiceberg commits on a clean exit).
        with table.update_schema(allow_incompatible_changes=bool(new_key)) as update:
            for old_name, new_name in renamed.items():
                update.rename_column(old_name, new_name)
            for n, kind, default in adds:
                update.add_column(n, kind.iceberg(), default_value=default)
            for n, want in widen:
                update.update_column(n, field_type=want)
            for n in drops:
                update.delete_column(n)
            if new_key:
                for f in new_key:
                    if not f.required:
                        update.update_column(f.name, required=True)
                update.set_identifier_fields(*(renamed.get(f.name, f.name) for f in new_key))
    except ValueError as exc:  # pyiceberg's own refusal of the change (pydantic's included)
        errors = getattr(exc, "errors", None)  # a pydantic ValidationError: its messages only
        reason = "; ".join(e["msg"] for e in errors()) if callable(errors) else str(exc)
        reason = " ".join(reason.split())
        raise IcebergError(
            f"{name}: Iceberg refused the schema change ({reason}); nothing of it was "
            "applied: recreate the Iceberg table, or route the table out of the Iceberg job"
        ) from None
