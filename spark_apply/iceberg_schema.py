"""An Iceberg table's schema for a routed table: its layout, its columns per form, their
evolution after a DDL (moved out of `iceberg_sink.IcebergTables`, which writes the rows).

`layout` projects an upstream table schema onto its target with each column's Iceberg kind
and converter (`iceberg_types`); `schema_of` is the schema a new table of a form gets;
`evolve_table` brings an existing table to a layout in one schema commit: RENAME COLUMN (the
statement's renames), ADD COLUMN (a constant DEFAULT as Iceberg's initial default:
`initial_default`), DROP COLUMN (the change log keeps the column), widening int→long,
float→double, decimal precision, a new primary key (identifier fields), and anything else
refused in one line (`iceberg_types.IcebergError`) before any of it is applied.

Narrowing ALTERs: each field that holds a column keeps the column's MySQL definition in its
doc (`column_doc`, written when the field is created or changed, and on a table written
before that at its next evolution), so it survives a restart. `refuse_narrowing` compares a
DDL's schema after it with those definitions and refuses, in one line, a column whose values
may not fit any more (`narrows`: a shorter length, a smaller integer range, fewer digits,
fewer ENUM members, a smaller character set). The sink asks for it only for an ALTER the
source ran without a STRICT sql_mode (`strict_session`): there the server cuts the values it
holds without row events, which Iceberg (string stays string) would never see; under STRICT
the server aborts an ALTER that meets a value that does not fit (MariaDB makes the copy's
truncation warnings errors for every engine), so an ALTER in the binlog changed no row —
except ``ALTER IGNORE``, treated as lenient, as is a DDL whose mode is unknown.
"""

from __future__ import annotations

import json
import logging
import re
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
ORDER = ("_ts", "_source", "_binlog_file", "_binlog_offset", "_txn_index")
"""The change-log columns that give its events' commit order (the merge's `ts`, then the
source's binlog position and the index in the transaction); a compaction writes its rows in
this order."""
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
        """The primary key's columns; none for a keyless table (PROTOCOL.md §9.3: its rows
        are identified by all their columns, which Iceberg's identifier fields cannot be —
        they must be required, and a keyless row may hold NULLs and repeat)."""
        return () if self.projection.keyless else self.projection.key_columns


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


def wanted_docs(lay: Layout, changelog: bool) -> dict[str, str]:
    """The doc of each field of the table of this form that holds a column (`column_doc`)."""
    sides = ("before_", "after_") if changelog else ("",)
    return {side + c.name: column_doc(c) for side in sides for c in lay.columns}


def schema_of(lay: Layout, changelog: bool) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    wanted = wanted_columns(lay, changelog)
    docs = wanted_docs(lay, changelog)
    fields = [
        NestedField(field_id=i, name=n, field_type=k.iceberg(), required=r, doc=docs.get(n))
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
    docs = wanted_docs(lay, changelog)
    names = {n for n, _, _ in wanted}
    by_name = {c.name: (c, k) for c, k in zip(lay.columns, lay.kinds, strict=True)}
    adds: list[tuple[str, Kind, Any, str | None]] = []
    widen: list[tuple[str, Any, str | None]] = []
    redoc: list[tuple[str, Any, str | None]] = []
    for n, kind, _ in wanted:
        have = current.get(n)
        if have is None:
            default = None if changelog else initial_default(name, *by_name[n])
            adds.append((n, kind, default, docs.get(n)))
            continue
        want = kind.iceberg()
        if have.field_type == want:
            if n in docs and have.doc != docs[n]:  # VARCHAR(3) → VARCHAR(10), or no doc yet
                redoc.append((have.name, None, docs[n]))
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
        widen.append((have.name, want, docs.get(n)))
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
    # DROP PRIMARY KEY: the identifier fields go (the columns stay required, as in MySQL).
    drop_key = not changelog and not lay.key and bool(schema.identifier_field_ids)
    if adds and drops:
        raise IcebergError(
            f"{name}: columns {drops} would go and {[a[0] for a in adds]} come in one "
            "change that names no column rename, which may be a RENAME (Iceberg would lose "
            "the old rows' values): the sink does not apply it; rename the column with "
            "RENAME COLUMN or CHANGE upstream, or recreate the Iceberg table"
        )
    if not (renamed or adds or widen or drops or new_key or redoc or drop_key):
        return table
    keys = [current[k] for k in new_key]
    _commit(table, name, renamed, adds, widen + redoc, drops, keys, drop_key)
    log.info(
        "evolved %s: renamed %s, added %s, widened %s, dropped %s, key %s",
        name,
        renamed,
        [a[0] for a in adds],
        [w[0] for w in widen],
        drops,
        new_key or ("dropped" if drop_key else "unchanged"),
    )
    return catalog.load_table(table.name())


def _commit(
    table: Any,
    name: str,
    renamed: Mapping[str, str],
    adds: list[tuple[str, Kind, Any, str | None]],
    widen: list[tuple[str, Any, str | None]],
    drops: list[str],
    new_key: list[Any],
    drop_key: bool = False,
) -> None:
    """One schema commit of `evolve_table`'s changes (`new_key`: the new key's fields as the
    table has them before the renames; `drop_key`: no identifier fields any more), or none of
    it: pyiceberg's own refusal in one line."""
    # A new key's columns become required (MySQL's key columns are NOT NULL, so every
    # row has them): an incompatible change by Iceberg's rules, allowed only then.
    try:
        # Nothing is committed when a call below raises (pyiceberg commits on a clean exit).
        with table.update_schema(allow_incompatible_changes=bool(new_key)) as update:
            for old_name, new_name in renamed.items():
                update.rename_column(old_name, new_name)
            for n, kind, default, doc in adds:
                update.add_column(n, kind.iceberg(), doc=doc, default_value=default)
            for n, want, doc in widen:  # `want` None: the doc only
                update.update_column(n, field_type=want, doc=doc)
            for n in drops:
                update.delete_column(n)
            if new_key:
                for f in new_key:
                    if not f.required:
                        update.update_column(f.name, required=True)
                update.set_identifier_fields(*(renamed.get(f.name, f.name) for f in new_key))
            elif drop_key:
                update.set_identifier_fields()
    except ValueError as exc:  # pyiceberg's own refusal of the change (pydantic's included)
        errors = getattr(exc, "errors", None)  # a pydantic ValidationError: its messages only
        reason = "; ".join(e["msg"] for e in errors()) if callable(errors) else str(exc)
        reason = " ".join(reason.split())
        raise IcebergError(
            f"{name}: Iceberg refused the schema change ({reason}); nothing of it was "
            "applied: recreate the Iceberg table, or route the table out of the Iceberg job"
        ) from None


# -- narrowing ALTERs -----------------------------------------------------------------------
#
# A lenient session's ALTER … MODIFY that narrows a column converts the rows the source holds
# (truncates, clips) without row events; Iceberg's type stays (string is string), so the
# current state would keep the old values. Each field's doc keeps the column's MySQL
# definition (`DOC`), written when the field is created or changed, so the comparison works
# after a restart; a field without one (a table written before) is compared by its Iceberg
# type, which tells the old definition of a DECIMAL only.

DOC = "mysql "
"""The head of a field's doc: the column's MySQL definition as JSON follows it."""
_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}
_TEXT_BYTES = {
    "tinytext": 255,
    "tinyblob": 255,
    "text": 65535,
    "blob": 65535,
    "mediumtext": 2**24 - 1,
    "mediumblob": 2**24 - 1,
    "longtext": 2**32 - 1,
    "longblob": 2**32 - 1,
    "json": 2**32 - 1,
}
_CHAR_BYTES = {"utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf32": 4}


def column_doc(column: ColumnSchema) -> str:
    """The doc of a field that holds `column`: its MySQL definition (what a later ALTER is
    compared with)."""
    spec = {
        k: v
        for k, v in column.to_dict().items()
        if k not in ("name", "nullable", "default") and v is not None and v != [] and v is not False
    }  # what is left out reads back as ColumnSchema's default
    return DOC + json.dumps(spec, sort_keys=True, separators=(",", ":"))


def doc_column(name: str, doc: str | None) -> ColumnSchema | None:
    """The MySQL definition a field's doc keeps, None without one (or one not ours)."""
    if not doc or not doc.startswith(DOC):
        return None
    try:
        spec = json.loads(doc[len(DOC) :])
        return ColumnSchema(name, **{**spec, "elements": tuple(spec.get("elements") or ())})
    except (ValueError, TypeError):
        return None


def type_text(c: ColumnSchema) -> str:
    """`c`'s type as MySQL spells it, for a message: ``varchar(10)``, ``int unsigned``."""
    name = c.type.lower()
    if name == "decimal":
        text = f"decimal({c.precision or 10},{c.scale or 0})"
    elif name in ("enum", "set"):
        text = name + "(" + ",".join("'" + e.replace("'", "''") + "'" for e in c.elements) + ")"
    elif c.length is not None and name not in _TEXT_BYTES:
        text = f"{name}({c.length})"
    else:
        text = name
    return text + (" unsigned" if c.unsigned else "")


def _int_range(c: ColumnSchema) -> tuple[int, int] | None:
    name = c.type.lower()
    if name == "bit":
        return 0, 2 ** (c.length or 1) - 1
    if name == "decimal":
        top = 10 ** ((c.precision or 10) - (c.scale or 0)) - 1
        return -top, top
    bits = _INT_BITS.get(name)
    if bits is None:
        return None
    return (0, 2**bits - 1) if c.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _limits(c: ColumnSchema) -> tuple[int, int, bool] | None:
    """The most characters and bytes a value of a string or binary column holds, and whether
    its own limit counts characters (CHAR, VARCHAR) or bytes; None for other types."""
    name = c.type.lower()
    if name in _TEXT_BYTES:
        return _TEXT_BYTES[name], _TEXT_BYTES[name], False
    if name in ("char", "varchar"):
        width = _CHAR_BYTES.get((c.charset or "").lower(), 1)
        return (c.length or 1), (c.length or 1) * width, True
    if name in ("binary", "varbinary"):
        return (c.length or 1), (c.length or 1), False
    return None


def narrows(old: ColumnSchema, new: ColumnSchema) -> bool:
    """Whether a value `old` holds may not fit `new` (the server would cut it): a shorter
    length, a smaller integer range (signed ↔ unsigned included), fewer integer digits or
    decimals, fewer ENUM/SET members, a character set with fewer characters. A change
    between kinds Iceberg cannot hold in one type is refused by `evolve_table` anyway; one
    this does not know (dates, FLOAT ↔ DOUBLE) is not a narrowing here."""
    o, n = old.type.lower(), new.type.lower()
    if n in ("enum", "set"):
        return not (o == n and set(old.elements) <= set(new.elements))
    if o in ("enum", "set"):  # to a string: each member's text must fit
        limits = _limits(new)
        longest = (
            len(",".join(old.elements)) if o == "set" else max(map(len, old.elements), default=0)
        )
        if limits is None:
            return True
        width = _CHAR_BYTES.get((old.charset or "").lower(), 1)
        max_chars, max_bytes, counts_chars = limits
        return longest > max_chars if counts_chars else longest * width > max_bytes
    before, after = _int_range(old), _int_range(new)
    if before is not None and after is not None:
        if (new.scale or 0) < (old.scale or 0):
            return True
        return after[0] > before[0] or after[1] < before[1]
    was, now = _limits(old), _limits(new)
    if was is None or now is None:
        return False
    sets = (old.charset or "").lower(), (new.charset or "").lower()
    if all(sets) and _CHAR_BYTES.get(sets[1], 1) < _CHAR_BYTES.get(sets[0], 1):
        return True  # a character the old set holds may not exist in the new one
    chars, size, _ = was
    max_chars, max_bytes, counts_chars = now
    return chars > max_chars if counts_chars else size > max_bytes


def strict_session(sql_mode: str | None, statement: str) -> bool:
    """Whether the source ran `statement` in a STRICT session: the server then aborts an ALTER
    whose copy meets a value that does not fit (MariaDB turns a STRICT_TRANS_TABLES or
    STRICT_ALL_TABLES warning into an error for the copy of any engine's table), so a
    narrowing it applied changed no row. Not with ``ALTER IGNORE`` (it cuts the values
    anyway), nor when the mode is unknown (an older writer's DDL)."""
    if sql_mode is None or _IGNORE.match(statement):
        return False
    modes = {m.strip().upper() for m in sql_mode.split(",")}
    return bool(modes & {"STRICT_TRANS_TABLES", "STRICT_ALL_TABLES"})


_IGNORE = re.compile(r"\s*ALTER\s+(?:ONLINE\s+)?IGNORE\s", re.IGNORECASE)


def refuse_narrowing(table: Any, lay: Layout, name: str, renames: Mapping[str, str]) -> None:
    """Refuse in one line a change of the current-state `table` to `lay` that narrows one of
    its columns (compared with the MySQL definition its field's doc keeps; without a doc, a
    DECIMAL's by its Iceberg type, nothing else is known)."""
    from pyiceberg.types import DecimalType

    back = {new: old for old, new in renames.items()}
    fields = {f.name: f for f in table.schema().fields}
    for column in lay.columns:
        field = fields.get(back.get(column.name, column.name))
        if field is None:
            continue
        old = doc_column(column.name, field.doc)
        if old is None and isinstance(field.field_type, DecimalType):
            t = field.field_type
            old = ColumnSchema(column.name, "decimal", precision=t.precision, scale=t.scale)
        if old is None or not narrows(old, column):
            continue
        raise IcebergError(
            f"{name}.{column.name} would narrow from {type_text(old)} to {type_text(column)} "
            "in a session without a STRICT sql_mode, where the source cuts the values it "
            "holds without row events (the Iceberg table would keep the old ones): nothing "
            "of it was applied; run the ALTER in a STRICT session (SET SESSION sql_mode = "
            "'STRICT_ALL_TABLES') upstream, or drop the Iceberg table and snapshot it again"
        )
