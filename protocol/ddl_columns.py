"""Column definitions and literals of MySQL/MariaDB DDL, read with the one tokenizer.

The column half of `rowbus.protocol.ddl_apply`: a column's type and attributes as a
`ColumnSchema` in the forms the binlog's table map gives (type names, lengths in characters,
charset and collation), and each DEFAULT as MariaDB's information_schema.COLUMNS shows it
(`default_text`). Pure text work; `DdlApplyError` for anything not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from rowbus.protocol.ddl import Token
from rowbus.protocol.events import ColumnSchema


class DdlApplyError(ValueError):
    """A part of a statement this interpreter does not model (the caller falls back)."""


@dataclass(frozen=True)
class Charsets:
    """Server facts: each charset's default collation (``utf8mb4`` -> ``utf8mb4_general_ci``)."""

    default_collation: Mapping[str, str]

    def collation_of(self, charset: str) -> str:
        found = self.default_collation.get(charset)
        if found is None:
            raise DdlApplyError(f"unknown charset {charset}")
        return found


MARIADB_CHARSETS = Charsets(
    {
        "utf8mb4": "utf8mb4_general_ci",
        "utf8mb3": "utf8mb3_general_ci",
        "latin1": "latin1_swedish_ci",
        "ascii": "ascii_general_ci",
        "binary": "binary",
        "utf16": "utf16_general_ci",
        "utf32": "utf32_general_ci",
        "ucs2": "ucs2_general_ci",
        "latin2": "latin2_general_ci",
        "cp1250": "cp1250_general_ci",
        "cp1251": "cp1251_general_ci",
        "greek": "greek_general_ci",
    }
)
"""MariaDB 10.11's defaults, for tests and for a tracker without a server at hand."""


def charset_of_collation(collation: str) -> str:
    return "binary" if collation == "binary" else collation.split("_", 1)[0]


def canon_charset(name: str) -> str:
    low = name.lower()
    return "utf8mb3" if low == "utf8" else low


# ---- tokens -----------------------------------------------------------------------------------


class Words:
    """Significant tokens with a cursor."""

    def __init__(self, tokens: list[Token]) -> None:
        self.t = [t for t in tokens if t.kind not in ("space", "comment")]
        self.k = 0

    def at(self, offset: int = 0) -> str:
        j = self.k + offset
        return self.t[j].upper if j < len(self.t) else ""

    def tok(self) -> Token:
        if self.k >= len(self.t):
            raise DdlApplyError("statement ends early")
        return self.t[self.k]

    def take(self) -> Token:
        tok = self.tok()
        self.k += 1
        return tok

    def accept(self, *words: str) -> bool:
        if self.at() in words:
            self.k += 1
            return True
        return False

    def accept_seq(self, *words: str) -> bool:
        if all(self.at(i) == w for i, w in enumerate(words)):
            self.k += len(words)
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.accept(word):
            raise DdlApplyError(f"expected {word} at {self.at() or 'the end'}")

    def name(self) -> str:
        tok = self.take()
        if tok.kind not in ("ident", "word"):
            raise DdlApplyError(f"expected a name at {tok.text}")
        return tok.name

    def int_arg(self) -> int:
        tok = self.take()
        if not tok.text.isdigit():
            raise DdlApplyError(f"expected a number at {tok.text}")
        return int(tok.text)

    def skip_group(self) -> None:
        """Skip a parenthesized group starting at the cursor."""
        self.expect("(")
        depth = 1
        while depth:
            word = self.take().text
            depth += {"(": 1, ")": -1}.get(word, 0)

    def skip_to_spec_end(self) -> None:
        """Skip to the next ``,`` or closing ``)`` at depth 0 (not consuming it)."""
        depth = 0
        while self.k < len(self.t):
            word = self.at()
            if depth == 0 and word in (",", ")"):
                return
            depth += {"(": 1, ")": -1}.get(word, 0)
            self.k += 1

    @property
    def done(self) -> bool:
        return self.k >= len(self.t) or (self.at() == ";" and self.k == len(self.t) - 1)


def string_value(tok: Token) -> str:
    """The value of a quoted string literal (MySQL escapes)."""
    body, quote = tok.text[1:-1], tok.text[0]
    out: list[str] = []
    i = 0
    escapes = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "b": "\b", "Z": "\x1a"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(escapes.get(nxt, nxt))
            i += 2
            continue
        if ch == quote and i + 1 < len(body) and body[i + 1] == quote:
            out.append(quote)
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


# ---- types ------------------------------------------------------------------------------------

_INTS = {
    "TINYINT": "tinyint",
    "INT1": "tinyint",
    "BOOL": "tinyint",
    "BOOLEAN": "tinyint",
    "SMALLINT": "smallint",
    "INT2": "smallint",
    "MEDIUMINT": "mediumint",
    "INT3": "mediumint",
    "MIDDLEINT": "mediumint",
    "INT": "int",
    "INTEGER": "int",
    "INT4": "int",
    "BIGINT": "bigint",
    "INT8": "bigint",
}
_TEXTS = {
    "TINYTEXT": "tinytext",
    "TEXT": "text",
    "MEDIUMTEXT": "mediumtext",
    "LONGTEXT": "longtext",
}
_BLOBS = {
    "TINYBLOB": "tinyblob",
    "BLOB": "blob",
    "MEDIUMBLOB": "mediumblob",
    "LONGBLOB": "longblob",
}
TEXT_BYTES = [("tiny", 255), ("", 65_535), ("medium", 16_777_215), ("long", 4_294_967_295)]
MBMAX = {"utf8mb4": 4, "utf16": 4, "utf16le": 4, "utf32": 4, "utf8mb3": 3, "ucs2": 2}
CHARACTER_TYPES = (
    "char",
    "varchar",
    "tinytext",
    "text",
    "mediumtext",
    "longtext",
    "enum",
    "set",
)


@dataclass
class _Type:
    name: str
    unsigned: bool = False
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    elements: tuple[str, ...] = ()
    charset: str | None = None
    """Forced by the type itself (NCHAR, JSON); else from attributes or the table."""
    collation: str | None = None
    binary: bool = False
    """BINARY/VARBINARY/BLOB: no charset."""


def _size(w: Words) -> int | None:
    if w.at() != "(":
        return None
    w.take()
    n = w.int_arg()
    w.expect(")")
    return n


def _numeric(w: Words, word: str) -> _Type | None:
    if word in _INTS:
        if word in ("BOOL", "BOOLEAN"):
            return _Type("tinyint")
        _size(w)
        return _Type(_INTS[word], unsigned=_sign(w))
    if word == "SERIAL":
        return _Type("bigint", unsigned=True)
    if word in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
        precision, scale = 10, 0
        if w.accept("("):
            precision = w.int_arg()
            if w.accept(","):
                scale = w.int_arg()
            w.expect(")")
        return _Type("decimal", unsigned=_sign(w), precision=precision, scale=scale)
    if word in ("FLOAT", "DOUBLE", "REAL", "FLOAT4", "FLOAT8"):
        name = "float" if word in ("FLOAT", "FLOAT4") else "double"
        if word == "DOUBLE":
            w.accept("PRECISION")
        if w.accept("("):
            p = w.int_arg()
            if w.accept(","):
                w.int_arg()
            elif name == "float" and p > 24:
                name = "double"
            w.expect(")")
        return _Type(name, unsigned=_sign(w))
    if word in ("DATE", "YEAR"):
        _size(w)
        # The binlog's signedness metadata marks YEAR unsigned.
        return _Type(word.lower(), unsigned=word == "YEAR")
    if word in ("TIME", "DATETIME", "TIMESTAMP"):
        return _Type(word.lower(), fsp=_size(w) or 0)
    if word == "BIT":
        return _Type("bit", length=_size(w) or 1)
    return None


def _character(w: Words, word: str) -> _Type | None:
    if word in ("NATIONAL", "NCHAR", "NVARCHAR"):
        return _parse_national(w, word)
    if word in ("CHAR", "CHARACTER"):
        if w.accept("VARYING"):
            return _Type("varchar", length=_size(w))
        return _Type("char", length=_size(w) or 1)
    if word in ("VARCHAR", "VARCHARACTER"):
        n = _size(w)
        if n is None:
            raise DdlApplyError("VARCHAR without a length")
        return _Type("varchar", length=n)
    if word == "BINARY":
        return _Type("binary", length=_size(w) or 1, binary=True)
    if word == "VARBINARY":
        return _Type("varbinary", length=_size(w), binary=True)
    if word in _TEXTS:
        n = _size(w) if word == "TEXT" else None
        return _Type(text_for(n) if n is not None else _TEXTS[word])
    if word in _BLOBS:
        n = _size(w) if word == "BLOB" else None
        name = text_for(n).replace("text", "blob") if n is not None else _BLOBS[word]
        return _Type(name, binary=True)
    if word == "LONG":
        if w.accept("VARBINARY"):
            return _Type("mediumblob", binary=True)
        w.accept("VARCHAR")
        return _Type("mediumtext")
    if word in ("ENUM", "SET"):
        w.expect("(")
        elements: list[str] = []
        while True:
            tok = w.take()
            if tok.kind != "string":
                raise DdlApplyError(f"{word} member is not a string literal")
            elements.append(string_value(tok))
            if not w.accept(","):
                break
        w.expect(")")
        return _Type(word.lower(), elements=tuple(elements))
    if word == "JSON":
        # MariaDB's JSON is LONGTEXT with utf8mb4_bin (and a CHECK the binlog does not show).
        return _Type("longtext", charset="utf8mb4", collation="utf8mb4_bin")
    return None


def _parse_type(w: Words) -> _Type:
    word = w.take().upper
    found = _numeric(w, word) or _character(w, word)
    if found is None:
        raise DdlApplyError(f"type {word} is not modelled")
    return found


def _parse_national(w: Words, word: str) -> _Type:
    if word == "NATIONAL":
        word = w.take().upper
        if (word in ("CHAR", "CHARACTER") and w.accept("VARYING")) or word == "VARCHAR":
            word = "NVARCHAR"
        else:
            word = "NCHAR"
    elif word == "NCHAR" and w.accept("VARCHAR", "VARYING"):
        word = "NVARCHAR"
    if word == "NVARCHAR":
        return _Type("varchar", length=_size(w), charset="utf8mb3")
    return _Type("char", length=_size(w) or 1, charset="utf8mb3")


def text_for(n: int) -> str:
    for size, limit in TEXT_BYTES:
        if n <= limit:
            return f"{size}text"
    return "longtext"


def _sign(w: Words) -> bool:
    unsigned = False
    while w.at() in ("UNSIGNED", "SIGNED", "ZEROFILL"):
        if w.at() == "ZEROFILL":
            # Its DEFAULT shows padded to the display width, which a schema does not carry.
            raise DdlApplyError("ZEROFILL is not modelled")
        unsigned = unsigned or w.at() == "UNSIGNED"
        w.take()
    return unsigned


# ---- defaults ---------------------------------------------------------------------------------

_ESCAPE = {"\\": "\\\\", "'": "''", "\0": "\\0", "\n": "\\n", "\r": "\\r", "\x1a": "\\Z"}
_NOW = ("CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP")


def quote_default(text: str) -> str:
    """A string DEFAULT as information_schema shows it."""
    return "'" + "".join(_ESCAPE.get(ch, ch) for ch in text) + "'"


def literal(w: Words) -> tuple[str, str | Decimal | None]:
    """('now', fsp text) / ('null', None) / ('str', value) / ('num', Decimal) / ('bits', str)."""
    tok = w.take()
    up = tok.upper
    if up == "(":
        raise DdlApplyError("an expression DEFAULT is not modelled")
    if up == "NULL":
        return "null", None
    if up in _NOW:
        fsp = ""
        if w.accept("("):
            fsp = "" if w.at() == ")" else str(w.int_arg())
            w.expect(")")
        return "now", fsp
    if up in ("TRUE", "FALSE"):
        return "num", Decimal(1 if up == "TRUE" else 0)
    sign = ""
    if up in ("-", "+"):
        sign = "-" if up == "-" else ""
        tok = w.take()
        up = tok.upper
    if tok.kind == "word" and tok.text.startswith("_") and w.tok().kind == "string":
        tok = w.take()  # a charset introducer: _utf8mb4'…'
    if tok.kind == "word" and up in ("N", "X", "B") and w.tok().kind == "string":
        inner = string_value(w.take())
        if up == "N":
            return "str", inner
        if up == "X":
            return "bytes", bytes.fromhex(inner).decode("latin1")
        return "bits", inner
    if tok.kind == "string":
        return "str", string_value(tok)
    if tok.kind == "word" and re.fullmatch(r"0[xX][0-9a-fA-F]+", tok.text):
        digits = tok.text[2:]
        return "bytes", bytes.fromhex(digits.zfill(len(digits) + len(digits) % 2)).decode("latin1")
    if (tok.kind == "word" and tok.text[:1].isdigit()) or tok.text == ".":
        text = tok.text
        # 1.5e3 and .5 arrive as several tokens: digits, '.', digits with an exponent.
        while w.k < len(w.t):
            nxt = w.tok().text
            if (nxt == "." and "." not in text and "e" not in text.lower()) or (
                text.endswith(".") and re.fullmatch(r"\d+([eE]\d*)?", nxt)
            ):
                text += w.take().text
            else:
                break
        if text[-1] in "eE" and w.at() in ("-", "+"):
            text += w.take().text + w.take().text
        try:
            return "num", Decimal(sign + text)
        except InvalidOperation as exc:
            raise DdlApplyError(f"number {text} not understood") from exc
    raise DdlApplyError(f"DEFAULT {tok.text} is not modelled")


def _float_text(value: float, single: bool) -> str:
    if value == 0:
        return "0"
    text = f"{value:g}" if single else repr(value)
    if text.endswith(".0"):
        text = text[:-2]
    mantissa, _, exp = text.partition("e")
    if exp:
        text = f"{mantissa}e{int(exp)}"
    return text


def _date_text(value: str, kind: str, fsp: int) -> str:
    text = value.strip()
    try:
        if kind == "date":
            if re.fullmatch(r"\d{8}", text):
                text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
            y, m, d = (int(p) for p in re.split(r"\D", text)[:3])
            return f"{y:04d}-{m:02d}-{d:02d}"
        if kind in ("datetime", "timestamp"):
            if re.fullmatch(r"\d{14}(\.\d+)?", text):
                text = f"{text[:4]}-{text[4:6]}-{text[6:8]} {text[8:10]}:{text[10:12]}:{text[12:]}"
            head, _, frac = text.partition(".")
            parts = [int(p) for p in re.split(r"\D+", head) if p]
            parts += [0] * (6 - len(parts))
            y, mo, d, h, mi, s = parts[:6]
            out = f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}"
            return out + ("." + frac.ljust(fsp, "0")[:fsp] if fsp else "")
        # time
        neg = text.startswith("-")
        head, _, frac = text.lstrip("-").partition(".")
        parts = [int(p) for p in head.split(":")]
        if len(parts) == 1:
            n = parts[0]
            parts = [n // 10000, n // 100 % 100, n % 100]
        while len(parts) < 3:
            parts.append(0)
        out = f"{'-' if neg else ''}{parts[0]:02d}:{parts[1]:02d}:{parts[2]:02d}"
        return out + ("." + frac.ljust(fsp, "0")[:fsp] if fsp else "")
    except (ValueError, IndexError) as exc:
        raise DdlApplyError(f"{kind} default {value!r} not understood") from exc


def _bits_text(bits: str | int) -> str:
    n = int(bits, 2) if isinstance(bits, str) else bits
    return f"b'{n:b}'"


def _numeric_default(col: ColumnSchema, kind: str, value: str | Decimal | None) -> str | None:
    """The DEFAULT text of a numeric or BIT column (None for other columns)."""
    t = col.type
    if t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year"):
        try:
            number = Decimal(value) if isinstance(value, str) else value
            assert number is not None
            n = int(number.to_integral_value(ROUND_HALF_UP))
        except (InvalidOperation, ValueError) as exc:
            raise DdlApplyError(f"default {value!r} of a {t} column") from exc
        if t == "year":
            if 0 < n < 70:
                n += 2000
            elif 70 <= n < 100:
                n += 1900
        return str(n)
    if t == "decimal":
        try:
            number = Decimal(value) if isinstance(value, str) else value
        except InvalidOperation as exc:
            raise DdlApplyError(f"default {value!r} of a decimal column") from exc
        assert number is not None
        rounded = number.quantize(Decimal(1).scaleb(-(col.scale or 0)), ROUND_HALF_UP)
        return str(rounded.copy_abs() if rounded == 0 else rounded)  # never "-0"
    if t in ("float", "double"):
        try:
            return _float_text(float(value or 0), t == "float")
        except ValueError as exc:
            raise DdlApplyError(f"default {value!r} of a {t} column") from exc
    if t == "bit":
        if kind == "bits":
            assert isinstance(value, str)
            return _bits_text(value)
        if kind == "num":
            assert isinstance(value, Decimal)
            return _bits_text(int(value))
        raise DdlApplyError("a string default of a BIT column")
    return None


def default_text(col: ColumnSchema, kind: str, value: str | Decimal | None) -> str:
    """A DEFAULT literal as information_schema.COLUMNS.COLUMN_DEFAULT shows it for `col`."""
    t = col.type
    if kind == "null":
        return "NULL"
    if kind == "now":
        if t not in ("datetime", "timestamp"):
            raise DdlApplyError(f"CURRENT_TIMESTAMP default of a {t} column")
        return f"current_timestamp({value})"
    number = _numeric_default(col, kind, value)
    if number is not None:
        return number
    if kind == "bits":
        raise DdlApplyError(f"a bit literal default of a {t} column")
    if t in ("binary", "varbinary") or t.endswith("blob"):
        raw = str(value).encode("latin1" if kind == "bytes" else "utf-8")
        if t == "binary":
            raw = raw.ljust(col.length or 0, b"\0")
        return quote_default(_shown_bytes(raw))
    text = str(value) if kind in ("str", "bytes") else _number_text(value)
    if kind == "bytes":
        text = _in_charset(str(value).encode("latin1"), col.charset)
    if t in ("date", "datetime", "timestamp", "time"):
        return quote_default(_date_text(text, t, col.fsp or 0))
    if t == "char":
        return quote_default(text.rstrip(" "))
    if t == "set":
        members = [m for m in text.split(",") if m]
        lower = [e.lower() for e in col.elements]
        try:
            order = sorted({lower.index(m.lower()) for m in members})
        except ValueError as exc:
            raise DdlApplyError(f"SET default {text!r} has a non-member") from exc
        return quote_default(",".join(col.elements[i] for i in order))
    if t == "enum":
        for e in col.elements:
            if e.lower() == text.lower():
                return quote_default(e)
        raise DdlApplyError(f"ENUM default {text!r} is not a member")
    return quote_default(text)


def _shown_bytes(raw: bytes) -> str:
    """Bytes as information_schema shows them: as UTF-8, each byte that is not '?'."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        for size in (1, 2, 3, 4):
            try:
                out.append(raw[i : i + size].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += size
            break
        else:
            out.append("?")
            i += 1
    return "".join(out)


def _in_charset(raw: bytes, charset: str | None) -> str:
    """A hex literal stored in a character column: its bytes read in the column's charset."""
    codec = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "latin1": "cp1252", "ascii": "ascii"}.get(
        charset or ""
    )
    if codec is None:
        raise DdlApplyError(f"a hex literal default in charset {charset}")
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as exc:
        raise DdlApplyError(f"a hex literal default not valid in {charset}") from exc


def _number_text(value: str | Decimal | None) -> str:
    return str(value)


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
    typ: _Type, attrs: _Attrs, table_collation: str, charsets: Charsets
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
    typ = _parse_type(w)
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
