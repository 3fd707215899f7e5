"""Column definitions of MySQL/MariaDB DDL, read with the one tokenizer.

The column half of `rowbus.producer.ddl.apply`: a column's type (`ddl_types`) and attributes
(DEFAULT through `ddl_defaults`) as a `ColumnSchema` in the forms the binlog's table map gives.
Pure text work; `DdlApplyError` for anything not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal

from rowbus.producer.ddl.defaults import default_text, literal
from rowbus.producer.ddl.types import CHARACTER_TYPES, ColType, parse_type
from rowbus.producer.ddl.words import (
    Charsets,
    DdlApplyError,
    Words,
    canon_charset,
    charset_of_collation,
)
from rowbus.protocol.events import ColumnSchema

# ---- column definitions -----------------------------------------------------------------------


@dataclass
class ColumnDef:
    """A column definition: the column, its inline keys and its FIRST/AFTER position."""

    column: ColumnSchema
    primary: bool = False
    unique: bool = False
    key: bool = False
    position: tuple[str, str | None] | None = None
    """("first", None) or ("after", column)."""


@dataclass
class _Attrs:
    """The attributes after a column's type, as read."""

    nullable: bool = True
    default: tuple[str, str | Decimal | None] | None = None
    auto: bool = False
    primary: bool = False
    unique: bool = False
    key: bool = False
    charset: str | None = None
    collation: str | None = None
    binary: bool = False
    position: tuple[str, str | None] | None = None

    def read(self, w: Words) -> None:
        """One attribute at the cursor."""
        word = w.take().upper
        if word == "NOT":
            w.expect("NULL")
            self.nullable = False
        elif word in _FLAGS:
            setattr(self, _FLAGS[word], True)
            if word in ("PRIMARY", "UNIQUE"):
                w.accept("KEY")
        elif word == "DEFAULT":
            self.default = literal(w)
        elif word in ("CHARACTER", "CHARSET"):
            if word == "CHARACTER":
                w.expect("SET")
            self.charset = canon_charset(w.name())
        elif word == "COLLATE":
            self.collation = w.name().lower()
        elif word in ("ASCII", "UNICODE"):
            self.charset = "latin1" if word == "ASCII" else "ucs2"
        elif word in ("COMMENT", "COLUMN_FORMAT", "STORAGE"):
            w.take()
        elif word == "ON":
            w.expect("UPDATE")
            literal(w)
        elif word == "CHECK":
            w.skip_group()
        elif word == "CONSTRAINT":
            if w.at() != "CHECK":
                w.take()
        elif word in ("FIRST", "AFTER"):
            self.position = ("first", None) if word == "FIRST" else ("after", w.name())
        elif word not in ("NULL", "INVISIBLE", "VISIBLE"):
            raise DdlApplyError(f"column attribute {word} is not modelled")


_FLAGS = {
    "AUTO_INCREMENT": "auto",
    "PRIMARY": "primary",
    "UNIQUE": "unique",
    "KEY": "key",
    "BINARY": "binary",
}


def _text_collation(
    typ: ColType, attrs: _Attrs, table_collation: str, charsets: Charsets
) -> str | None:
    """The collation of a character column (None: it is binary)."""
    charset, collation = attrs.charset or typ.charset, attrs.collation or typ.collation
    if typ.binary or "binary" in (charset, collation):
        return None
    if collation is None:
        collation = charsets.collation_of(charset) if charset else table_collation
    if collation == "binary":
        return None
    if attrs.binary:  # the BINARY attribute: the charset's _bin collation
        collation = f"{charset_of_collation(collation)}_bin"
    return collation


def column_def(w: Words, name: str, table_collation: str, charsets: Charsets) -> ColumnDef:
    """The column definition at the cursor (after its name), up to ``,`` or ``)``."""
    if charsets.native_json and w.at() == "JSON":
        w.take()
        typ = ColType("json")  # MySQL's own type (MariaDB's JSON is LONGTEXT: parse_type)
    else:
        typ = parse_type(w)
    attrs = _Attrs()
    while not w.done and w.at() not in (",", ")"):
        attrs.read(w)
    nullable = attrs.nullable and not (attrs.primary or attrs.auto)  # as the server makes them
    type_name, collation = typ.name, None
    if typ.name in CHARACTER_TYPES or typ.binary:
        collation = _text_collation(typ, attrs, table_collation, charsets)
        if collation is None and typ.name in ("char", "varchar"):
            type_name = "binary" if typ.name == "char" else "varbinary"
        elif collation is None and typ.name.endswith("text"):
            type_name = typ.name.replace("text", "blob")
    col = ColumnSchema(
        name=name,
        type=type_name,
        unsigned=typ.unsigned,
        nullable=nullable,
        length=typ.length,
        precision=typ.precision,
        scale=typ.scale,
        fsp=typ.fsp,
        charset=charset_of_collation(collation) if collation else None,
        elements=typ.elements,
        collation=collation,
    )
    if attrs.auto:
        dflt = None
    elif attrs.default is None:
        dflt = "NULL" if nullable else None
    else:
        dflt = default_text(col, *attrs.default)
        if dflt == "NULL" and not nullable:
            raise DdlApplyError(f"DEFAULT NULL of NOT NULL column {name}")
    return ColumnDef(
        replace(col, default=dflt), attrs.primary, attrs.unique, attrs.key, attrs.position
    )


def key_columns(w: Words) -> list[str]:
    w.expect("(")
    cols: list[str] = []
    while True:
        tok = w.tok()
        if tok.kind not in ("ident", "word") or tok.upper == "(":
            raise DdlApplyError("an expression key part is not modelled")
        cols.append(w.name())
        if w.at() == "(":
            w.skip_group()  # a prefix length
        w.accept("ASC", "DESC")
        if not w.accept(","):
            break
    w.expect(")")
    return cols


def index_options(w: Words) -> None:
    while not w.done and w.at() not in (",", ")"):
        if w.accept("USING") or w.accept("COMMENT"):
            w.take()
        elif w.accept("KEY_BLOCK_SIZE"):
            w.accept("=")
            w.take()
        elif w.accept("VISIBLE", "INVISIBLE", "IGNORED", "CLUSTERING"):
            w.accept("=")
            if w.at() in ("YES", "NO"):
                w.take()
        else:
            raise DdlApplyError(f"index option {w.tok().text} is not modelled")
