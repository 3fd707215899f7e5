"""The type matrix: every MySQL/MariaDB column type by its edge values, as SQL literals run on a
real source, and how a value read back from the source with pymysql compares with a protocol
value (the conversions of PROTOCOL.md §2.1).

Each `Case` is one table ``f_<name> (id INT PRIMARY KEY, v <type>)`` holding one row per literal
(ids 1..n) and a NULL row (id 0). Rows are written with ``sql_mode=''`` so zero dates, the ENUM
error value and the like are stored as a user's lenient server stores them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
from dataclasses import dataclass
from typing import Any

from rowbus.protocol.values import Value, ZeroDate


@dataclass(frozen=True)
class Case:
    name: str
    type: str
    literals: tuple[str, ...]

    @property
    def table(self) -> str:
        return f"f_{self.name}"

    def create(self) -> str:
        return f"CREATE TABLE `{self.table}` (id INT PRIMARY KEY, v {self.type})"

    def inserts(self) -> list[str]:
        rows = ["(0, NULL)"] + [f"({i}, {lit})" for i, lit in enumerate(self.literals, 1)]
        return [f"INSERT INTO `{self.table}` VALUES {', '.join(rows)}"]


_U = "UNSIGNED"
CASES: tuple[Case, ...] = (
    Case("tinyint", "TINYINT", ("-128", "127", "0")),
    Case("tinyint_u", f"TINYINT {_U}", ("0", "255")),
    Case("smallint", "SMALLINT", ("-32768", "32767")),
    Case("smallint_u", f"SMALLINT {_U}", ("65535",)),
    Case("mediumint", "MEDIUMINT", ("-8388608", "8388607")),
    Case("mediumint_u", f"MEDIUMINT {_U}", ("16777215",)),
    Case("int", "INT", ("-2147483648", "2147483647")),
    Case("int_u", f"INT {_U}", ("4294967295",)),
    Case("bigint", "BIGINT", ("-9223372036854775808", "9223372036854775807", "0")),
    Case("bigint_u", f"BIGINT {_U}", ("18446744073709551615", "9223372036854775808", "0")),
    Case(
        "decimal_max",
        "DECIMAL(65,30)",
        (
            "99999999999999999999999999999999999.999999999999999999999999999999",
            "-99999999999999999999999999999999999.999999999999999999999999999999",
            "-0.000000000000000000000000000001",
            "0",
        ),
    ),
    Case("decimal_int", "DECIMAL(10,0)", ("-9999999999", "9999999999", "0")),
    Case("decimal_frac", "DECIMAL(5,5)", ("0.99999", "-0.00001")),
    Case("float", "FLOAT", ("3.40282e38", "-1.17549e-38", "0", "0.1", "1.5", "-1e-45")),
    Case(
        "double",
        "DOUBLE",
        ("1.7976931348623157e308", "-2.2250738585072014e-308", "0", "0.1", "5e-324", "-1.5"),
    ),
    Case("bit1", "BIT(1)", ("b'0'", "b'1'")),
    Case("bit64", "BIT(64)", ("b'" + "1" * 64 + "'", "0", "b'101'")),
    Case("char", "CHAR(5) CHARSET utf8mb4", ("'ab   '", "''", "'abcde'", "'😀é'", "'  a'")),
    Case("varchar", "VARCHAR(10) CHARSET utf8mb4", ("'ab  '", "''", "' '", "'Zoë 😀'")),
    Case(
        "latin1",
        "VARCHAR(16) CHARSET latin1",
        ("X'C381'", "X'80818D8F909D9FFF'", "'é'", "X'A0'", "''"),
    ),
    Case("latin1_char", "CHAR(4) CHARSET latin1", ("X'C381'", "X'9D'")),
    Case("latin1_text", "TEXT CHARSET latin1", ("X'C3816180'",)),
    Case("ascii", "VARCHAR(8) CHARSET ascii", ("'abc'", "''")),
    Case("utf8mb3", "VARCHAR(8) CHARSET utf8mb3", ("'ñ€'",)),
    Case("ucs2", "VARCHAR(8) CHARSET ucs2", ("'Ωx'", "''")),
    Case("utf16", "VARCHAR(8) CHARSET utf16", ("'😀a'",)),
    Case("utf8mb4_bin", "VARCHAR(8) CHARSET utf8mb4 COLLATE utf8mb4_bin", ("'Aa'",)),
    Case("utf32", "VARCHAR(8) CHARSET utf32", ("'😀𝄞'", "''")),
    Case("utf16le", "VARCHAR(8) CHARSET utf16le", ("'héllo'",)),
    Case("gbk", "VARCHAR(8) CHARSET gbk", ("'中文测试'", "''", "'A长 '")),
    Case("gbk_char", "CHAR(4) CHARSET gbk", ("'汉字'", "' '")),
    Case("gbk_text", "TEXT CHARSET gbk", ("REPEAT('长', 500)",)),
    Case("gb2312", "VARCHAR(8) CHARSET gb2312", ("'简体'",)),
    Case("big5", "VARCHAR(8) CHARSET big5", ("'中文測試'",)),
    Case("sjis", "VARCHAR(8) CHARSET sjis", ("'テスト表'", "'ｱ'")),
    Case("cp932", "VARCHAR(8) CHARSET cp932", ("'①ソ能表'", "'\uff5e'")),
    Case("ujis", "VARCHAR(8) CHARSET ujis", ("'にほんご'",)),
    Case("euckr", "VARCHAR(8) CHARSET euckr", ("'한국어'",)),
    Case("cp1250", "VARCHAR(8) CHARSET cp1250", ("'Zażółć'",)),
    Case("latin2_char", "CHAR(5) CHARSET latin2", ("'Łódź'", "''")),
    Case("koi8r", "VARCHAR(8) CHARSET koi8r", ("'Привет'",)),
    Case("greek", "VARCHAR(8) CHARSET greek", ("'Ελληνικά'",)),
    Case("hebrew", "VARCHAR(8) CHARSET hebrew", ("'שלום'",)),
    Case("tis620", "VARCHAR(8) CHARSET tis620", ("'ภาษาไทย'",)),
    Case("binary4", "BINARY(4)", ("X'61'", "X''", "X'00000000'", "X'61000000'", "X'FFFFFFFF'")),
    Case("varbinary", "VARBINARY(8)", ("X''", "X'00'", "X'6100'", "X'FF'")),
    Case("tinyblob", "TINYBLOB", ("X''", "X'00FF'")),
    Case("blob", "BLOB", ("X''", "X'00'", "REPEAT(X'FF00', 1000)")),
    Case("mediumblob", "MEDIUMBLOB", ("REPEAT(X'00AB', 40000)",)),
    Case("longblob", "LONGBLOB", ("X''", "X'01'")),
    Case("tinytext", "TINYTEXT", ("''", "'x'")),
    Case("text", "TEXT", ("''", "REPEAT('é', 2000)")),
    Case("mediumtext", "MEDIUMTEXT", ("REPEAT('😀', 20000)",)),
    Case("longtext", "LONGTEXT", ("''", "'end  '")),
    Case("date", "DATE", ("'1000-01-01'", "'9999-12-31'", "'0000-00-00'", "'2024-00-15'")),
    Case("date_zero_day", "DATE", ("'2024-05-00'",)),
    Case(
        "datetime",
        "DATETIME",
        ("'1000-01-01 00:00:00'", "'9999-12-31 23:59:59'", "'0000-00-00 00:00:00'"),
    ),
    Case("datetime3", "DATETIME(3)", ("'2024-01-01 00:00:00.123'", "'0000-00-00 00:00:00.000'")),
    Case(
        "datetime6",
        "DATETIME(6)",
        ("'9999-12-31 23:59:59.999999'", "'2024-00-00 10:11:12.000001'", "'1970-01-01'"),
    ),
    Case(
        "timestamp",
        "TIMESTAMP NULL",
        ("'1970-01-01 00:00:01'", "'2038-01-19 03:14:07'", "'0000-00-00 00:00:00'"),
    ),
    Case("timestamp6", "TIMESTAMP(6) NULL", ("'2038-01-19 03:14:07.999999'", "0")),
    Case("time", "TIME", ("'-838:59:59'", "'838:59:59'", "'00:00:00'", "'-00:00:01'")),
    Case(
        "time6",
        "TIME(6)",
        (
            "'-00:00:00.250000'",
            "'-838:59:59.999999'",
            "'838:59:59.999999'",
            "'-00:00:01.000001'",
            "'12:34:56.5'",
            "'-12:00:00.000001'",
        ),
    ),
    Case("time1", "TIME(1)", ("'-00:00:00.1'", "'-01:00:00.9'", "'00:00:00.5'")),
    Case("time3", "TIME(3)", ("'-01:00:00.001'", "'-00:00:00.999'")),
    Case("time4", "TIME(4)", ("'-00:00:00.0001'",)),
    Case("year", "YEAR", ("0", "1901", "2155", "'2000'")),
    Case("enum", "ENUM('a','b','')", ("'a'", "'b'", "''")),
    Case("enum_error", "ENUM('a','b')", ("'zzz'",)),
    Case("set", "SET('x','y','z')", ("''", "'x,z'", "'x,y,z'", "'y'")),
    Case("enum_latin1", "ENUM('é','x','Ä ') CHARSET latin1", ("'é'", "'Ä '", "'x'")),
    Case("enum_gbk", "ENUM('中','文') CHARSET gbk", ("'文'",)),
    Case("enum_quotes", "ENUM('a,b','it''s','q\"q','x\\\\y')", ("'a,b'", "'it''s'", "'x\\\\y'")),
    Case("set_latin1", "SET('ü','a b','ß') CHARSET latin1", ("'ü,ß'", "'a b'")),
    Case(
        "uuid",
        "UUID",
        (
            "'123e4567-e89b-12d3-a456-426655440000'",
            "'00000000-0000-0000-0000-000000000000'",
            "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
        ),
    ),
    Case("inet6", "INET6", ("'::1'", "'2001:db8::ff00:42:8329'", "'::ffff:192.0.2.128'", "'::'")),
    Case("inet4", "INET4", ("'127.0.0.1'", "'0.0.0.0'", "'255.255.255.255'")),
    Case("json", "JSON", ("'{\"a\": [1, 2.5, null, true]}'", "'[]'", "'\"s\"'", "'null'")),
)
ALL_TYPES = {c.name: c for c in CASES}


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def select(case: Case) -> str:
    """The SELECT reading a case's table back from a server, in id order. FLOAT is read as
    DOUBLE: the server prints a FLOAT with 6 digits, too few to name its binary32 value."""
    column = "CAST(v AS DOUBLE)" if case.type.startswith("FLOAT") else "v"
    return f"SELECT id, {column} FROM `{case.table}` ORDER BY id"


def from_source(case: Case, value: Any) -> Value:
    """A value pymysql read from the source, as the protocol carries it (PROTOCOL.md §2.1)."""
    t = case.type.split("(")[0].split()[0].upper()
    if value is None:
        return None
    if t == "BIT":
        return int.from_bytes(value, "big")
    if t == "UUID":
        return bytes.fromhex(value.replace("-", ""))  # the 16 bytes, in the text's order
    if t in ("INET6", "INET4"):
        return ipaddress.ip_address(value).packed  # network order; INET4 has 4 bytes
    if t in ("DATE", "DATETIME", "TIMESTAMP") and isinstance(value, str):
        return ZeroDate(value)  # pymysql hands back the text of a date it cannot build
    if t == "TIMESTAMP":
        return value.replace(tzinfo=dt.UTC)  # read with time_zone '+00:00'
    if t == "SET":
        members = value if isinstance(value, set) else (value.split(",") if value else ())
        return frozenset(members)
    if t in ("CHAR", "VARCHAR", "TEXT") and "latin1" not in case.type and isinstance(value, bytes):
        return value.decode("utf-8")
    return value  # type: ignore[no-any-return]


def same(case: Case, wire: Value, source: Value) -> bool:
    """`wire` (a protocol value) equals `source` (converted by `from_source`), types included."""
    if case.type.startswith("FLOAT") and isinstance(wire, float) and isinstance(source, float):
        return wire == source and _f32(wire) == wire
    return type(wire) is type(source) and wire == source
