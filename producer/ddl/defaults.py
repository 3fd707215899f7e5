"""Column DEFAULTs of MySQL/MariaDB DDL, each as MariaDB's information_schema.COLUMNS shows it."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from rowbus.producer.ddl.words import DdlApplyError, Words, string_value
from rowbus.protocol.events import ColumnSchema

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
        while not w.ended:
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
    # Members lost their trailing spaces at CREATE (`ddl.types`); a default is matched
    # without them too (the server compares with PAD SPACE).
    if t == "set":
        members = [m.rstrip(" ") for m in text.split(",") if m]
        lower = [e.lower() for e in col.elements]
        try:
            order = sorted({lower.index(m.lower()) for m in members})
        except ValueError as exc:
            raise DdlApplyError(f"SET default {text!r} has a non-member") from exc
        return quote_default(",".join(col.elements[i] for i in order))
    if t == "enum":
        for e in col.elements:
            if e.lower() == text.rstrip(" ").lower():
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
