"""Column types of MySQL/MariaDB DDL as the binlog's table map gives them (type names, lengths
in characters, charset and collation)."""

from __future__ import annotations

from dataclasses import dataclass

from rowbus.producer.ddl.words import DdlApplyError, Words, string_value

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
class ColType:
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


def _length(w: Words) -> int:
    """A CHAR/BINARY length: 1 when not given, and 0 when given as 0 (CHAR(0) is a column)."""
    n = _size(w)
    return 1 if n is None else n


def _numeric(w: Words, word: str) -> ColType | None:
    if word in _INTS:
        if word in ("BOOL", "BOOLEAN"):
            return ColType("tinyint")
        _size(w)
        return ColType(_INTS[word], unsigned=_sign(w))
    if word == "SERIAL":
        return ColType("bigint", unsigned=True)
    if word in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
        precision, scale = 10, 0
        if w.accept("("):
            precision = w.int_arg()
            if w.accept(","):
                scale = w.int_arg()
            w.expect(")")
        return ColType("decimal", unsigned=_sign(w), precision=precision, scale=scale)
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
        return ColType(name, unsigned=_sign(w))
    if word in ("DATE", "YEAR"):
        _size(w)
        # The binlog's signedness metadata marks YEAR unsigned.
        return ColType(word.lower(), unsigned=word == "YEAR")
    if word in ("TIME", "DATETIME", "TIMESTAMP"):
        return ColType(word.lower(), fsp=_size(w) or 0)
    if word == "BIT":
        return ColType("bit", length=_size(w) or 1)
    return None


def _character(w: Words, word: str) -> ColType | None:
    if word in ("NATIONAL", "NCHAR", "NVARCHAR"):
        return _parse_national(w, word)
    if word in ("CHAR", "CHARACTER"):
        if w.accept("VARYING"):
            return ColType("varchar", length=_size(w))
        return ColType("char", length=_length(w))
    if word in ("VARCHAR", "VARCHARACTER"):
        n = _size(w)
        if n is None:
            raise DdlApplyError("VARCHAR without a length")
        return ColType("varchar", length=n)
    if word == "BINARY":
        return ColType("binary", length=_length(w), binary=True)
    if word == "VARBINARY":
        return ColType("varbinary", length=_size(w), binary=True)
    if word in _TEXTS:
        n = _size(w) if word == "TEXT" else None
        return ColType(text_for(n) if n is not None else _TEXTS[word])
    if word in _BLOBS:
        n = _size(w) if word == "BLOB" else None
        name = text_for(n).replace("text", "blob") if n is not None else _BLOBS[word]
        return ColType(name, binary=True)
    if word == "LONG":
        if w.accept("VARBINARY"):
            return ColType("mediumblob", binary=True)
        w.accept("VARCHAR")
        return ColType("mediumtext")
    if word in ("ENUM", "SET"):
        w.expect("(")
        elements: list[str] = []
        while True:
            tok = w.take()
            if tok.kind != "string":
                raise DdlApplyError(f"{word} member is not a string literal")
            # The server drops a member's trailing spaces when it creates the table (MySQL
            # and MariaDB alike): ENUM('Ä ') holds 'Ä', as the table map's members say.
            elements.append(string_value(tok).rstrip(" "))
            if not w.accept(","):
                break
        w.expect(")")
        return ColType(word.lower(), elements=tuple(elements))
    if word == "JSON":
        # MariaDB's JSON is LONGTEXT with utf8mb4_bin (and a CHECK the binlog does not show).
        return ColType("longtext", charset="utf8mb4", collation="utf8mb4_bin")
    return None


def parse_type(w: Words) -> ColType:
    word = w.take().upper
    found = _numeric(w, word) or _character(w, word)
    if found is None:
        raise DdlApplyError(f"type {word} is not modelled")
    return found


def _parse_national(w: Words, word: str) -> ColType:
    if word == "NATIONAL":
        word = w.take().upper
        if (word in ("CHAR", "CHARACTER") and w.accept("VARYING")) or word == "VARCHAR":
            word = "NVARCHAR"
        else:
            word = "NCHAR"
    elif word == "NCHAR" and w.accept("VARCHAR", "VARYING"):
        word = "NVARCHAR"
    if word == "NVARCHAR":
        return ColType("varchar", length=_size(w), charset="utf8mb3")
    return ColType("char", length=_length(w), charset="utf8mb3")


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
