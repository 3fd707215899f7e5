"""Tables and row values as MySQL 8.4 writes them: the Table_map event with FULL optional
metadata, the v2 Rows events with the 8.0 extra-data part, and each column type's binary form.

A `Column` is built from a column's SQL type (the subset the MySQL 8 corpus uses: integers,
DECIMAL, FLOAT/DOUBLE, BIT, CHAR/VARCHAR/BINARY/VARBINARY, BLOB/TEXT, ENUM/SET, DATE, YEAR,
DATETIME/TIMESTAMP/TIME with fractional seconds, JSON), in the character sets of `CHARSETS`;
`Column.encode` turns a Python value as pymysql reads it from a server (or a string's stored
bytes) into the column's bytes in a row image.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.mysql8 import jsonb, jsondiff
from tests.mysql8.events import lenenc, lenenc_str
from tests.mysql8.jsondiff import JsonDiff

TINY, SHORT, LONG, FLOAT, DOUBLE, TIMESTAMP, LONGLONG, INT24 = 1, 2, 3, 4, 5, 7, 8, 9
DATE, YEAR, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = 10, 13, 15, 16, 17, 18, 19
JSON, NEWDECIMAL, ENUM, SET, BLOB, VAR_STRING, STRING = 245, 246, 247, 248, 252, 253, 254
UTF8MB4, BINARY = 255, 63
"""utf8mb4_0900_ai_ci (8.4's default collation) and binary, by collation id."""


@dataclass(frozen=True)
class Charset:
    """A MySQL 8.4 character set: its default collation's id (``information_schema.
    COLLATIONS.ID``; MySQL and MariaDB number these charsets' default collations alike),
    the most bytes a character takes (``CHARACTER_SETS.MAXLEN``: a CHAR/VARCHAR(n) holds
    n times that many bytes) and the Python codec that writes ENUM/SET members' text."""

    collation: int
    maxlen: int
    codec: str


CHARSETS = {
    "big5": Charset(1, 2, "big5"),
    "koi8r": Charset(7, 1, "koi8_r"),
    "latin1": Charset(8, 1, "cp1252"),  # MySQL's latin1 is cp1252 (its five gaps aside)
    "latin2": Charset(9, 1, "iso8859_2"),
    "ascii": Charset(11, 1, "ascii"),
    "ujis": Charset(12, 3, "euc_jp"),
    "sjis": Charset(13, 2, "shift_jis"),
    "hebrew": Charset(16, 1, "iso8859_8"),
    "tis620": Charset(18, 1, "tis_620"),
    "euckr": Charset(19, 2, "euc_kr"),
    "gb2312": Charset(24, 2, "gb2312"),
    "greek": Charset(25, 1, "iso8859_7"),
    "cp1250": Charset(26, 1, "cp1250"),
    "gbk": Charset(28, 2, "gbk"),
    "utf8mb3": Charset(33, 3, "utf-8"),  # MariaDB's utf8mb3 too; "utf8" is its old alias
    "ucs2": Charset(35, 2, "utf-16-be"),
    "utf16": Charset(54, 4, "utf-16-be"),
    "utf16le": Charset(56, 4, "utf-16-le"),
    "utf32": Charset(60, 4, "utf-32-be"),
    "cp932": Charset(95, 2, "cp932"),
    "gb18030": Charset(248, 4, "gb18030"),
    "utf8mb4": Charset(UTF8MB4, 4, "utf-8"),
}
"""The character sets of the fidelity corpus, with MySQL 8.4's default collations."""
COLLATIONS = {"utf8mb4_bin": 46, "utf8mb4_general_ci": 45, "latin1_bin": 47}
"""Collations the corpus names other than a charset's default, by id."""
_INTS = {"TINYINT": (TINY, 1), "SMALLINT": (SHORT, 2), "MEDIUMINT": (INT24, 3)}
_INTS |= {"INT": (LONG, 4), "BIGINT": (LONGLONG, 8)}
_BLOBS = {"TINY": 1, "": 2, "MEDIUM": 3, "LONG": 4}
NUMERIC = {TINY, SHORT, INT24, LONG, LONGLONG, FLOAT, DOUBLE, NEWDECIMAL}
"""Types the signedness bitmap covers (MySQL's is_numeric_type)."""


@dataclass
class Column:
    name: str
    type: int
    meta: bytes
    encode: Callable[[Any], bytes]
    unsigned: bool = False
    collation: int | None = None
    """A character column's collation id (binary strings: 63); None for the others."""
    members: tuple[str, ...] = ()
    """ENUM/SET members."""
    primary: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def column(name: str, sql: str, primary: bool = False) -> Column:
    """The column `name` of SQL type `sql` (as the corpus writes it)."""
    text = sql.strip()
    upper = text.upper()
    base = re.match(r"[A-Z0-9]+", upper)
    assert base is not None, sql
    word = base.group(0)
    args = re.search(r"\(([^)]*)\)", text)
    arg = args.group(1) if args else ""
    unsigned = "UNSIGNED" in upper
    if word in _INTS:
        code, size = _INTS[word]

        def enc_int(v: Any, size: int = size) -> bytes:
            return int(v).to_bytes(size, "little", signed=not unsigned)

        return Column(name, code, b"", enc_int, unsigned=unsigned, primary=primary)
    if word == "DECIMAL":
        precision, scale = (int(x) for x in arg.split(","))
        return Column(
            name,
            NEWDECIMAL,
            bytes([precision, scale]),
            lambda v: decimal_bytes(decimal.Decimal(v), precision, scale),
            unsigned=unsigned,
        )
    if word == "DOUBLE":
        return Column(name, DOUBLE, b"\x08", lambda v: struct.pack("<d", v))
    if word == "FLOAT":
        return Column(name, FLOAT, b"\x04", lambda v: struct.pack("<f", v))
    if word == "BIT":
        bits = int(arg or 1)
        nbytes = (bits + 7) // 8
        return Column(
            name,
            BIT,
            bytes([bits % 8, bits // 8]),
            lambda v: int.from_bytes(v, "big").to_bytes(nbytes, "big"),
        )
    charset = _charset(text)
    if word in ("VARCHAR", "VARBINARY"):
        binary = word == "VARBINARY"
        max_bytes = int(arg) * (1 if binary else charset.maxlen)
        width = 1 if max_bytes < 256 else 2
        return Column(
            name,
            VARCHAR,
            struct.pack("<H", max_bytes),
            lambda v: _text(v, width, charset),
            collation=BINARY if binary else _collation(text, charset),
        )
    if word in ("CHAR", "BINARY"):
        binary = word == "BINARY"
        max_bytes = int(arg or 1) * (1 if binary else charset.maxlen)
        real = STRING
        meta = bytes([real ^ ((max_bytes & 0x300) >> 4), max_bytes & 0xFF])
        width = 1 if max_bytes < 256 else 2
        return Column(
            name,
            STRING,
            meta,
            lambda v: _text(v, width, charset),
            collation=BINARY if binary else _collation(text, charset),
        )
    if word.endswith(("BLOB", "TEXT")):
        size = _BLOBS[word[:-4]]
        text_type = word.endswith("TEXT")
        return Column(
            name,
            BLOB,
            bytes([size]),
            lambda v: _text(v, size, charset),
            collation=_collation(text, charset) if text_type else BINARY,
        )
    if word in ("ENUM", "SET"):
        members = _members_of(text)
        collation = _collation(text, charset)
        if word == "ENUM":
            width = 1 if len(members) < 256 else 2
            return Column(
                name,
                STRING,
                bytes([ENUM, width]),
                lambda v: (members.index(v) + 1 if v in members else 0).to_bytes(width, "little"),
                collation=collation,
                members=members,
                extra={"codec": charset.codec},
            )
        width = (len(members) + 7) // 8
        width = 8 if width > 4 else width

        def enc_set(v: Any) -> bytes:
            chosen = v if isinstance(v, set | frozenset) else set(v.split(",") if v else ())
            mask = sum(1 << members.index(m) for m in chosen)
            return mask.to_bytes(width, "little")

        return Column(
            name,
            STRING,
            bytes([SET, width]),
            enc_set,
            collation=collation,
            members=members,
            extra={"codec": charset.codec},
        )
    if word == "DATE":
        return Column(name, DATE, b"", _date)
    if word == "YEAR":
        return Column(name, YEAR, b"", lambda v: bytes([int(v) - 1900 if int(v) else 0]))
    fsp = int(arg or 0)
    if word == "DATETIME":
        return Column(name, DATETIME2, bytes([fsp]), lambda v: datetime2(v, fsp))
    if word == "TIMESTAMP":
        return Column(name, TIMESTAMP2, bytes([fsp]), lambda v: timestamp2(v, fsp))
    if word == "TIME":
        return Column(name, TIME2, bytes([fsp]), lambda v: time2(v, fsp))
    if word == "JSON":
        return Column(name, JSON, b"\x04", lambda v: _sized(jsonb.encode(json.loads(v)), 4))
    raise ValueError(f"no MySQL 8 binary form for {sql!r}")


_QUOTED = re.compile(r"'((?:[^'\\]|''|\\.)*)'")
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _members_of(text: str) -> tuple[str, ...]:
    """ENUM/SET members as the server stores them: each quoted literal with SQL's escapes
    undone ('' and a backslash before a character; MySQL's default sql_mode has no
    NO_BACKSLASH_ESCAPES) and its trailing spaces dropped (MySQL and MariaDB both drop them
    when the table is created)."""

    def unescape(literal: str) -> str:
        literal = literal.replace("''", "'")
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), literal)

    body = text[text.index("(") : text.rindex(")") + 1]
    return tuple(unescape(m).rstrip(" ") for m in _QUOTED.findall(body))


def _charset(text: str) -> Charset:
    """The column's character set: its CHARSET clause, else the charset its COLLATE clause
    names, else utf8mb4 (MySQL 8.4's default)."""
    outside = re.sub(r"'(?:[^'\\]|''|\\.)*'", "''", text)  # not inside ENUM members
    found = re.search(r"\b(?:CHARSET|CHARACTER SET)\s+(\w+)", outside, re.IGNORECASE)
    if found is None:
        found = re.search(r"\bCOLLATE\s+([a-z0-9]+)_", outside, re.IGNORECASE)
    name = found.group(1).lower() if found else "utf8mb4"
    name = "utf8mb3" if name == "utf8" else name
    if name not in CHARSETS:
        raise ValueError(f"no MySQL 8 character set {name!r} here (in {text!r})")
    return CHARSETS[name]


def _collation(text: str, charset: Charset) -> int:
    outside = re.sub(r"'(?:[^'\\]|''|\\.)*'", "''", text)
    found = re.search(r"\bCOLLATE\s+(\w+)", outside, re.IGNORECASE)
    return COLLATIONS[found.group(1).lower()] if found else charset.collation


def _sized(data: bytes, width: int) -> bytes:
    return len(data).to_bytes(width, "little") + data


def _text(v: Any, width: int, charset: Charset) -> bytes:
    """A string's bytes with their length: bytes as given (what the server stores), text
    in the column's charset."""
    return _sized(v.encode(charset.codec) if isinstance(v, str) else bytes(v), width)


_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_bytes(value: decimal.Decimal, precision: int, scale: int) -> bytes:
    """DECIMAL(precision, scale) in MySQL's binary form: the integer and fraction digits in
    groups of nine (4 bytes big-endian each, a short group for the rest), the integer's short
    group first and the fraction's last; a negative number has every bit inverted; the top
    bit of the first byte is flipped so that the bytes sort as the numbers."""
    negative = value < 0
    digits = f"{value.copy_abs():.{scale}f}"  # abs() would round to the context's 28 digits
    whole, _, frac = digits.partition(".")
    intg = precision - scale
    whole = whole.rjust(intg, "0")[-intg:] if intg else ""
    out = bytearray()
    lead = intg % 9
    if lead:
        out += int(whole[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, intg, 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    full = scale // 9 * 9
    for i in range(0, full, 9):
        out += int(frac[i : i + 9]).to_bytes(4, "big")
    if scale % 9:
        out += int(frac[full:]).to_bytes(_DIG2BYTES[scale % 9], "big")
    if negative:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes(out)


def _frac(micros: int, fsp: int) -> bytes:
    if fsp == 0:
        return b""
    size = (fsp + 1) // 2
    return int(micros // 10 ** (6 - 2 * size)).to_bytes(size, "big")


@dataclass(frozen=True)
class _Fields:
    """A date or date-time by its fields: pymysql gives the text of one it cannot build
    (zero dates such as '0000-00-00' or '2024-00-15', stored by a lenient server)."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0


def _fields(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    numbers = [int(n) for n in re.findall(r"\d+", v)]
    if "." in v:
        numbers[-1] = int(v.rsplit(".", 1)[1].ljust(6, "0"))
    else:
        numbers.append(0)
    return _Fields(*(numbers + [0] * 7)[:7])


def _date(v: Any) -> bytes:
    v = _fields(v)
    return int(v.day | v.month << 5 | v.year << 9).to_bytes(3, "little")


def datetime2(v: Any, fsp: int) -> bytes:
    """DATETIME(fsp): 40 bits big-endian (sign, year*13+month, day, hour, minute, second)
    offset by 2^39, then the fraction in (fsp+1)//2 bytes."""
    v = _fields(v)
    ym = v.year * 13 + v.month
    ymd = ym << 5 | v.day
    hms = v.hour << 12 | v.minute << 6 | v.second
    return int((ymd << 17 | hms) + (1 << 39)).to_bytes(5, "big") + _frac(v.microsecond, fsp)


def timestamp2(v: Any, fsp: int) -> bytes:
    """TIMESTAMP(fsp): seconds since the epoch (4 bytes big-endian), then the fraction; the
    zero timestamp is 0."""
    if isinstance(v, str):
        return bytes(4) + _frac(0, fsp)
    seconds = int(v.replace(tzinfo=dt.UTC).timestamp()) if v.tzinfo is None else int(v.timestamp())
    return seconds.to_bytes(4, "big") + _frac(v.microsecond, fsp)


def time2(v: dt.timedelta, fsp: int) -> bytes:
    """TIME(fsp): the packed time (hour<<12|minute<<6|second, then 24 bits of microseconds),
    negative values as the negated number, offset so that the bytes sort; the fraction's
    precision decides the width (MySQL's my_time_packed_to_binary)."""
    total = v.days * 86400_000000 + v.seconds * 1_000000 + v.microseconds
    negative = total < 0
    micros = abs(total)
    seconds, frac = divmod(micros, 1_000000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    packed = ((hours << 12 | minutes << 6 | secs) << 24) | frac
    nr = -packed if negative else packed
    int_part = nr >> 24  # an arithmetic shift, as C's on a signed long long

    def c_rem(a: int, b: int) -> int:  # C's remainder takes the sign of the dividend
        r = abs(a) % b
        return -r if a < 0 else r

    frac_part = c_rem(nr, 1 << 24)
    if fsp == 0:
        return (int_part + 0x800000).to_bytes(3, "big")
    if fsp <= 2:
        return (int_part + 0x800000).to_bytes(3, "big") + bytes([int(frac_part / 10000) & 0xFF])
    if fsp <= 4:
        return (int_part + 0x800000).to_bytes(3, "big") + (int(frac_part / 100) & 0xFFFF).to_bytes(
            2, "big"
        )
    return (nr + 0x800000000000).to_bytes(6, "big")


def _bits(flags: list[bool]) -> bytes:
    """A bitmap, first item in the lowest bit (row images, null bitmaps)."""
    out = bytearray((len(flags) + 7) // 8)
    for i, on in enumerate(flags):
        if on:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _msb_bits(flags: list[bool]) -> bytes:
    """A bitmap, first item in the highest bit (the table map's optional metadata)."""
    out = bytearray((len(flags) + 7) // 8)
    for i, on in enumerate(flags):
        if on:
            out[i >> 3] |= 0x80 >> (i & 7)
    return bytes(out)


def table_map_body(table_id: int, schema: str, table: str, columns: list[Column]) -> bytes:
    """Table_map_event's body with binlog_row_metadata=FULL: signedness, the character
    columns' and the ENUM/SET columns' charsets (each in MySQL's shorter form, `charsets`),
    column names, SET and ENUM members (in their column's charset), the simple primary key,
    column visibility."""
    body = table_id.to_bytes(6, "little") + b"\x01\x00"
    body += bytes([len(schema)]) + schema.encode() + b"\x00"
    body += bytes([len(table)]) + table.encode() + b"\x00"
    body += lenenc(len(columns)) + bytes(c.type for c in columns)
    meta = b"".join(c.meta for c in columns)
    body += lenenc(len(meta)) + meta
    body += _bits([not c.primary for c in columns])
    tlv: list[tuple[int, bytes]] = []
    numeric = [c for c in columns if c.type in NUMERIC]
    if numeric:
        tlv.append((1, _msb_bits([c.unsigned for c in numeric])))
    plain = [c.collation for c in columns if c.collation is not None and not c.members]
    if plain:
        tlv.append(charsets(plain, 2, 3))
    tlv.append((4, b"".join(lenenc_str(c.name.encode()) for c in columns)))
    sets = [c for c in columns if c.members and c.meta[0] == SET]
    if sets:
        tlv.append((5, b"".join(_members(c) for c in sets)))
    enums = [c for c in columns if c.members and c.meta[0] == ENUM]
    if enums:
        tlv.append((6, b"".join(_members(c) for c in enums)))
    keys = [i for i, c in enumerate(columns) if c.primary]
    if keys:
        tlv.append((8, b"".join(lenenc(i) for i in keys)))
    if sets or enums:
        listed = [c.collation for c in columns if c.members and c.collation is not None]
        tlv.append(charsets(listed, 10, 11))
    tlv.append((12, _msb_bits([True] * len(columns))))
    for kind, value in tlv:
        body += bytes([kind]) + lenenc_str(value)
    return body


def charsets(collations: list[int], default_kind: int, column_kind: int) -> tuple[int, bytes]:
    """The charsets of a group of columns (the character columns: DEFAULT_CHARSET or
    COLUMN_CHARSET; the ENUM/SET columns: ENUM_AND_SET_DEFAULT_CHARSET or _COLUMN_CHARSET) in
    the shorter form by MySQL's own estimate (Table_map_log_event::init_charset_field, one
    byte per index and id): every column's collation when that count is below 1 plus 2 per
    column off the most used collation, else the most used collation then (index within
    the group, collation) for the others. Ties go to the lowest id (MySQL scans a std::map)."""
    counts: dict[int, int] = {}
    for collation in collations:
        counts[collation] = counts.get(collation, 0) + 1
    default = max(sorted(counts), key=lambda c: counts[c])
    if len(collations) < 1 + (len(collations) - counts[default]) * 2:
        return column_kind, b"".join(lenenc(c) for c in collations)
    differ = b"".join(lenenc(i) + lenenc(c) for i, c in enumerate(collations) if c != default)
    return default_kind, lenenc(default) + differ


def _members(c: Column) -> bytes:
    """An ENUM/SET column's members, in the column's character set."""
    codec = str(c.extra.get("codec", "utf-8"))
    return lenenc(len(c.members)) + b"".join(lenenc_str(m.encode(codec)) for m in c.members)


def image(columns: list[Column], values: tuple[Any, ...]) -> bytes:
    """One row image with every column present: the null bitmap, then each value's bytes."""
    nulls = _bits([v is None for v in values])
    return nulls + b"".join(
        c.encode(v) for c, v in zip(columns, values, strict=True) if v is not None
    )


def partial_image(
    columns: list[Column], values: tuple[Any, ...], diffs: dict[int, list[JsonDiff]]
) -> bytes:
    """A Partial_update_rows event's after image (MySQL's pack_row with PARTIAL_JSON): the
    value options (a packed integer, 1 when a JSON column of the row is logged as a diff,
    else 0), then, when 1, the partial bits (one per JSON column of the table, in column
    order), then the image as usual except that the JSON columns in `diffs` (by column index)
    hold their diff vector instead of the document."""
    json_columns = [i for i, c in enumerate(columns) if c.type == JSON]
    out = lenenc(1 if diffs else 0)
    if diffs:
        out += _bits([i in diffs for i in json_columns])
    out += _bits([v is None for v in values])
    for i, (c, v) in enumerate(zip(columns, values, strict=True)):
        if i in diffs:
            out += jsondiff.vector(diffs[i])
        elif v is not None:
            out += c.encode(v)
    return out


def rows_body(
    table_id: int,
    columns: list[Column],
    images: list[tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]],
    partition: int | None = None,
    last: bool = True,
    partial: list[dict[int, list[JsonDiff]]] | None = None,
) -> bytes:
    """A v2 Rows event's body: table id, flags (STMT_END_F on the statement's last event), the
    extra data (its length counts itself; with `partition`, the 8.0 partition info: tag 1 and
    the partition id, and for updates the source partition too), the column count, the
    columns-present bitmaps (every column: binlog_row_image=FULL), then the images. With
    `partial` (per row, the JSON diffs by column index), a Partial_update_rows body: each after
    image is a `partial_image`."""
    update = images[0][0] is not None and images[0][1] is not None
    extra = b""
    if partition is not None:
        extra = bytes([1]) + struct.pack("<H", partition)
        if update:
            extra += struct.pack("<H", partition)
    body = table_id.to_bytes(6, "little") + struct.pack("<HH", 1 if last else 0, 2 + len(extra))
    body += extra + lenenc(len(columns))
    present = _bits([True] * len(columns))
    body += present + (present if update else b"")
    for n, (before, after) in enumerate(images):
        if before is not None:
            body += image(columns, before)
        if after is not None and partial is not None:
            body += partial_image(columns, after, partial[n])
        elif after is not None:
            body += image(columns, after)
    return body
