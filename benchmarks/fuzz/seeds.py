"""Seed inputs for the targets, in `formats`' encodings, from real values: the edge values of
the apply job's renderer tests and the protocol's test records, encoded as MySQL writes them
(binlog row images, text result-set rows) and as the readers publish them (protobuf records,
`protocol/testdata/*.pb`)."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from decimal import Decimal
from typing import Any

from benchmarks.fuzz import formats
from benchmarks.fuzz.build import ROOT
from rowbus.producer.fastrows import (
    BIT,
    BYTES,
    DATE,
    DATETIME2,
    DECIMAL,
    DOUBLE,
    ENUM,
    FLOAT,
    SET,
    SINT,
    TEXT,
    TIME2,
    TIMESTAMP2,
    UINT,
    UTF8,
    YEAR,
    Plan,
)  # fmt: skip
from rowbus.protocol.codec import Encoding, encode
from rowbus.protocol.codec.fastpath import split
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import Op
from rowbus.protocol.values import ZeroDate
from rowbus.testing.events import resolved, row

EDGES: tuple[Any, ...] = (
    -0.0, 5e-324, 1.7976931348623157e308, 1e16, 0.1,
    Decimal("-0.00"), Decimal("0"), Decimal("1E+3"), Decimal("-12.50"), Decimal("235273930.92"),
    "", "\x00\\'\"\n\r\x1a", "žluť 🐍", "it's",
    b"", b"\x00\xff", b"\x01",
    ZeroDate("0000-00-00 00:00:00.000"), ZeroDate("2024-00-15"),
    dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2021, 11, 19),
    dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2022, 11, 27, 9, 17, 55, 14753), dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
    -dt.timedelta(microseconds=1), dt.timedelta(hours=838, minutes=59, seconds=59),
    dt.timedelta(hours=-1, seconds=3),
    frozenset({"b", "a"}), 2**63, 2**64 - 1, -(2**63), 0, 1, -5, None,
)  # fmt: skip
"""The edge values of tests/unit/spark_apply/test_rendered.py and the W1 image."""


# ---- binlog row images (MySQL's formats, as _rows.c reads them) ------------------------------

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def binlog_decimal(value: Decimal, precision: int, scale: int) -> bytes:
    """MySQL's binary DECIMAL: 9-digit groups in 4 bytes, the partial ones in fewer, the sign in
    the first bit, a negative number's bytes inverted."""
    wide = decimal.Context(prec=100)  # 65 digits: more than the default context's 28
    sign, digits, exp = value.quantize(Decimal(1).scaleb(-scale), context=wide).as_tuple()
    text = "".join(map(str, digits)).rjust(precision, "0")
    assert isinstance(exp, int)
    whole, frac = text[: precision - scale], text[precision - scale :]
    out = bytearray()
    lead = len(whole) % 9
    if lead:
        out += int(whole[:lead]).to_bytes(_DIG2BYTES[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i : i + 9]).to_bytes(4, "big")
    for i in range(0, len(frac) - len(frac) % 9, 9):
        out += int(frac[i : i + 9]).to_bytes(4, "big")
    tail = len(frac) % 9
    if tail:
        out += int(frac[-tail:]).to_bytes(_DIG2BYTES[tail], "big")
    out[0] ^= 0x80
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    return bytes(out)


def _frac(us: int, fsp: int) -> bytes:
    n = (fsp + 1) // 2
    return (us // (10, 10000, 100, 1)[n]).to_bytes(n, "big") if n else b""


def datetime2(v: dt.datetime, fsp: int) -> bytes:
    ym = v.year * 13 + v.month
    packed = ((ym << 5 | v.day) << 17) | (v.hour << 12 | v.minute << 6 | v.second)
    return (packed + 0x8000000000).to_bytes(5, "big") + _frac(v.microsecond, fsp)


def time2(v: dt.timedelta, fsp: int) -> bytes:
    n = (fsp + 1) // 2
    us = abs(v) // dt.timedelta(microseconds=1)
    secs, frac = divmod(us, 1_000_000)
    packed = (secs // 3600) << 12 | (secs // 60 % 60) << 6 | secs % 60
    scaled = frac // (10, 10000, 100, 1)[n] if n else 0
    body = packed << (8 * n) | scaled
    if v < dt.timedelta(0):
        body = -body
    return (body + (0x800000 << (8 * n))).to_bytes(3 + n, "big")


def _length(raw: bytes, size: int) -> bytes:
    return len(raw).to_bytes(size, "little") + raw


def _string_values() -> list[str]:
    return [v for v in EDGES if isinstance(v, str)]


def decode_seeds() -> list[bytes]:
    """One table per group of kinds: its plan, a row of edge values (and a NULL row), in each
    mode."""
    tables: list[tuple[Plan, list[bytes]]] = []
    ints = [-5, 0, 1, 2**31 - 1, -(2**63)]
    sint = ((SINT, 1, 0, None), (SINT, 2, 0, None), (SINT, 3, 0, None), (SINT, 4, 0, None),
            (SINT, 8, 0, None), (UINT, 8, 0, None), (YEAR, 0, 0, None))  # fmt: skip
    for v in ints:
        tables.append((sint, [
            (v & 0x7F).to_bytes(1, "little"), (v & 0x7FFF).to_bytes(2, "little"),
            (v & 0x7FFFFF).to_bytes(3, "little"), (v & 0x7FFFFFFF).to_bytes(4, "little"),
            (v & (2**64 - 1)).to_bytes(8, "little"), (2**64 - 1).to_bytes(8, "little"),
            bytes([abs(v) % 256]),
        ]))  # fmt: skip
    floats = ((FLOAT, 0, 0, None), (DOUBLE, 0, 0, None))
    for d in (v for v in EDGES if isinstance(v, float)):
        tables.append(
            (floats, [struct.pack("<f", d if abs(d) < 3e38 else 1.0), struct.pack("<d", d)])
        )
    decimals: Plan = ((DECIMAL, 30, 4, None), (DECIMAL, 65, 30, None), (DECIMAL, 10, 0, None))
    for number in (v for v in EDGES if isinstance(v, Decimal)):
        tables.append((decimals, [binlog_decimal(number, 30, 4), binlog_decimal(number, 65, 30),
                                  binlog_decimal(number.to_integral_value(), 10, 0)]))  # fmt: skip
    text = ((BYTES, 1, 0, None), (BYTES, 1, 16, None), (UTF8, 2, 0, None), (TEXT, 1, 0, None),
            (BYTES, 4, 0, None))  # fmt: skip
    for s in _string_values():
        raw = s.encode()
        latin = s.encode("latin-1", "replace")
        tables.append((text, [_length(raw, 1), _length(raw[:16], 1), _length(raw, 2),
                              _length(latin, 1), _length(raw, 4)]))  # fmt: skip
    temporal = ((DATE, 0, 0, None), (DATETIME2, 6, 0, None), (DATETIME2, 0, 0, None),
                (TIMESTAMP2, 3, 0, None), (TIME2, 6, 0, None), (TIME2, 1, 0, None))  # fmt: skip
    times = [v for v in EDGES if isinstance(v, dt.timedelta)]
    for i, when in enumerate(v for v in EDGES if isinstance(v, dt.datetime)):
        date = when.year << 9 | when.month << 5 | when.day
        ts = int(when.replace(tzinfo=dt.UTC).timestamp()) % 2**32
        t = times[i % len(times)]
        stamp = ts.to_bytes(4, "big") + _frac(when.microsecond, 3)
        tables.append((temporal, [date.to_bytes(3, "little"), datetime2(when, 6),
                                  datetime2(when, 0), stamp, time2(t, 6),
                                  time2(t, 1)]))  # fmt: skip
    tables.append((temporal, [bytes(3), (0x8000000000).to_bytes(5, "big") + bytes(3),
                              (0x8000000000).to_bytes(5, "big"), bytes(6),
                              time2(dt.timedelta(0), 6), time2(dt.timedelta(0), 1)]))  # fmt: skip
    members = ("a", "b", "c")
    sets: Plan = ((SET, 1, 0, members), (BIT, 2, 0, None), (ENUM, 1, 0, ("", *members)),
            (ENUM, 2, 0, None))  # fmt: skip
    tables.append((sets, [b"\x05", b"\x01\x02", b"\x02", b"\x01\x00"]))
    seeds = []
    for plan, values in tables:
        n = len(plan)
        present = bytes((n + 7) // 8 * [0xFF])
        nulls = bytes((n + 7) // 8)
        image = nulls + b"".join(values)
        all_null = bytes((n + 7) // 8 * [0xFF])
        for mode in (0, 1, 2):
            body = image + image if mode == 2 else image + all_null
            second = present if mode == 2 else None
            seeds.append(formats.Decode(mode, plan, present, second, body).encode())
    return seeds


def split_seeds() -> list[bytes]:
    """Dump-stream packets of binlog events (tests/unit/producer/mysql8_events), whole, cut,
    and ending in an error packet."""
    events = [b"\x00" + bytes(19) + bytes(range(40)), b"\x00" + b"\x01" * 30, b"\xfe\x00\x00"]
    stream = b"".join(formats.packet(i, e) for i, e in enumerate(events))
    return [
        formats.encode_split(0, stream),
        formats.encode_split(0, stream[:-5]),
        formats.encode_split(4, stream),
        formats.encode_split(0, formats.packet(0, b"\xff\x10\x04boom")),
    ]


def change_seeds() -> list[bytes]:
    """Before and after images of edge values (up to 8 a row)."""
    seeds = []
    for i in range(0, len(EDGES), 4):
        before = EDGES[i : i + 8]
        after = EDGES[i + 1 : i + 9]
        out = bytes([formats.CHANGE, len(before) + 1])
        out += b"".join(formats.write_value(v) for v in before)
        out += bytes([len(after) + 1]) + b"".join(formats.write_value(v) for v in after)
        seeds.append(out + bytes([i % 4, 3, 0, 1, 5]))
    return seeds


# ---- result sets ------------------------------------------------------------------------------


def _text(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, dt.timedelta):
        secs = v // dt.timedelta(seconds=1)
        return f"{secs // 3600}:{secs // 60 % 60:02}:{secs % 60:02}".encode()
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=None).isoformat(" ").encode()
    return str(v).encode()


def resultset_seeds() -> list[bytes]:
    """Text rows of the edge values: each with the column kinds of its types, then an EOF
    packet; one ending in an error packet; one read in two parts."""
    kinds_of: dict[type, int] = {
        int: 3, float: 4, Decimal: 5, str: 1, bytes: 0, dt.date: 9, dt.datetime: 10,
        dt.timedelta: 2, ZeroDate: 10, frozenset: 7, bool: 3, type(None): 6,
    }  # fmt: skip
    seeds = []
    for i in range(0, len(EDGES), 6):
        values = EDGES[i : i + 6]
        kinds = [kinds_of[type(v)] for v in values]
        payload = b"".join(
            b"\xfb" if t is None else formats.lenenc(len(t)) + t for t in map(_text, values)
        )
        rows = formats.packet(0, payload) + formats.packet(1, payload)
        eof = formats.packet(2, b"\xfe\x00\x00\x02\x00")
        err = formats.packet(2, b"\xff\x10\x04#HY000boom")
        seeds.append(formats.encode_resultset(kinds, 0, 0, rows + eof))
        seeds.append(formats.encode_resultset(kinds, 0, len(rows) - 3, rows + err))
    seeds.append(
        formats.encode_resultset(
            [11, 9], 5, 2, formats.packet(5, b"\x130000-00-00 00:00:00\x0a2024-02-30")
        )
    )
    return seeds


# ---- protobuf records ------------------------------------------------------------------------


def row_text_seeds() -> list[bytes]:
    """The protocol's test records and encoded rows of edge values, each op."""
    seeds = [bytes([formats.ROW_TEXT]) + p.read_bytes()
             for p in sorted((ROOT / "protocol" / "testdata").glob("*.pb"))]  # fmt: skip
    for i in range(0, len(EDGES), 3):
        image = (i, *EDGES[i : i + 3])
        for op in Op:
            before = None if op in (Op.INSERT, Op.READ) else image
            after = None if op is Op.DELETE else image
            try:
                value, _ = encode(row(i + 1, op, before, after), Encoding.PROTOBUF)
            except ProtocolError:
                value = b""  # a value no record holds (a float NaN, ...): no seed
            if value:
                seeds.append(bytes([formats.ROW_TEXT]) + value)
    value, _ = encode(resolved(5), Encoding.PROTOBUF)
    return [*seeds, bytes([formats.ROW_TEXT]) + value]


def render_seeds() -> list[bytes]:
    seeds = []
    for i in range(len(EDGES)):
        image = EDGES[i : i + 5]
        seeds.append(formats.encode_render(*split(image)))
    return seeds


def seeds(target: str) -> list[bytes]:
    if target == "rows":
        return [*decode_seeds(), *split_seeds(), *change_seeds()]
    if target == "resultset":
        return resultset_seeds()
    if target == "literals":
        return [*row_text_seeds(), *render_seeds()]
    if target.startswith("canary"):
        return [target.removeprefix("canary").encode()]
    raise ValueError(target)
