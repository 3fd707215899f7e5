"""Bad bytes and bad headers raise ProtocolError naming the position; never a wrong value."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest

from rowbus.protocol.codec import Encoding, decode, encode
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    Op,
    ReaderCheckpoint,
    Resolved,
    RowChange,
    TxnRef,
)

POS = "rowbus.db1[3]@42"
ROW = RowChange(
    source="db1",
    ts=(1_700_000_000_000 << 16) | 1,
    op=Op.UPDATE,
    schema="shop",
    table="orders",
    schema_id=123,
    primary_key=("id",),
    before=(1, "a", Decimal("1.50"), None, dt.date(2024, 1, 1)),
    after=(1, "b", Decimal("2.50"), b"\x00", dt.date(2024, 1, 2)),
    txn=TxnRef("uuid:7", 0, 1),
    position=BinlogPosition("binlog.000001", 1234, "uuid:7"),
)


@pytest.mark.parametrize("encoding", list(Encoding), ids=lambda e: e.value)
def test_every_truncation_is_refused_with_the_position(encoding: Encoding) -> None:
    value, headers = encode(ROW, encoding)
    for cut in range(len(value)):
        with pytest.raises(ProtocolError) as info:
            decode(value[:cut], headers, POS)
        assert info.value.position == POS
        assert str(info.value).startswith(POS + ": ")


@pytest.mark.parametrize("encoding", [Encoding.PROTOBUF, Encoding.AVRO])
def test_trailing_garbage_is_refused(encoding: Encoding) -> None:
    value, headers = encode(ROW, encoding)
    with pytest.raises(ProtocolError):
        decode(value + b"\x00", headers, POS)


def test_any_flipped_protobuf_byte_is_caught_by_the_crc() -> None:
    value, headers = encode(ROW)
    for i in range(len(value)):
        broken = bytearray(value)
        broken[i] ^= 0x40
        with pytest.raises(ProtocolError):
            decode(bytes(broken), headers, POS)


def test_an_unknown_major_version_is_refused_clearly() -> None:
    value, headers = encode(ROW)
    headers = [(k, b"2.0" if k == "rowbus-version" else v) for k, v in headers]
    with pytest.raises(ProtocolError, match=r"unsupported protocol version 2\.0.*reads 1\.x"):
        decode(value, headers, POS)


def test_a_newer_minor_version_is_read() -> None:
    value, headers = encode(ROW)
    headers = [(k, b"1.7" if k == "rowbus-version" else v) for k, v in headers]
    assert decode(value, headers) == ROW


@pytest.mark.parametrize("version", [b"one", b"1", b"", b"1.x"])
def test_a_malformed_version_is_refused(version: bytes) -> None:
    value, _ = encode(ROW)
    with pytest.raises(ProtocolError, match="malformed rowbus-version"):
        decode(value, [("rowbus-version", version)])


def test_an_unknown_kind_header_is_refused() -> None:
    value, _ = encode(ROW)
    with pytest.raises(ProtocolError, match="unknown event kind 'merge'"):
        decode(value, [("rowbus-kind", b"merge")], POS)


def test_a_kind_header_that_contradicts_the_value_is_refused() -> None:
    value, _ = encode(ROW)
    with pytest.raises(ProtocolError, match="holds a row"):
        decode(value, [("rowbus-kind", b"resolved")], POS)


def test_an_unknown_kind_in_the_value_is_refused() -> None:
    with pytest.raises(ProtocolError, match="unknown event kind 'merge'"):
        decode(b'{"merge":{}}', [("rowbus-encoding", b"json")])
    # protobuf: an Envelope whose body is field 10 (a kind from the future), with a valid crc
    import zlib

    body = b"\x52\x00"
    value = body + b"\x7d" + zlib.crc32(body).to_bytes(4, "little")
    with pytest.raises(ProtocolError, match="unknown or missing event kind"):
        decode(value, None, POS)


def test_an_unknown_encoding_is_refused() -> None:
    value, _ = encode(ROW)
    with pytest.raises(ProtocolError, match="unknown encoding 'thrift'"):
        decode(value, [("rowbus-encoding", b"thrift")])


def test_a_header_without_value_is_refused() -> None:
    with pytest.raises(ProtocolError, match="has no value"):
        decode(b"{}", [("rowbus-encoding", None)])


def test_a_tombstone_is_refused() -> None:
    with pytest.raises(ProtocolError, match="tombstone"):
        decode(None, [], POS)


@pytest.mark.parametrize("encoding", [Encoding.PROTOBUF, Encoding.JSON])
def test_without_headers_protobuf_and_json_are_sniffed(encoding: Encoding) -> None:
    value, _ = encode(ROW, encoding)
    assert decode(value, None) == ROW
    assert decode(value, []) == ROW


def test_without_headers_avro_is_not_guessed() -> None:
    value, _ = encode(Resolved(source="a", ts=1), Encoding.AVRO)
    with pytest.raises(ProtocolError):
        decode(value, None)


@pytest.mark.parametrize(
    "bad",
    [
        True,
        2**64,
        -(2**63) - 1,
        math.nan,
        math.inf,
        Decimal("NaN"),
        Decimal("-Infinity"),
        dt.timedelta(hours=839),
        frozenset({1}),
        [1],
        "\ud800",
        object(),
    ],
    # An object's repr holds its address: pytest-xdist's workers must collect the same ids.
    ids=lambda v: "object()" if type(v) is object else repr(v),
)
@pytest.mark.parametrize("encoding", list(Encoding), ids=lambda e: e.value)
def test_values_outside_the_domain_are_refused_on_encode(encoding: Encoding, bad: object) -> None:
    row = RowChange(
        source="a",
        ts=1,
        op=Op.INSERT,
        schema="d",
        table="t",
        schema_id=1,
        primary_key=(),
        before=None,
        after=(1, bad),  # type: ignore[arg-type]
        txn=TxnRef("x", 0),
        position=BinlogPosition("f", 4),
    )
    with pytest.raises(ProtocolError):
        encode(row, encoding)


@pytest.mark.parametrize(
    "image",
    [
        '[{"decimal":"NaN"}]',
        '[{"decimal":"1.2.3"}]',
        "[NaN]",
        "[1e999]",
        "[true]",
        "[18446744073709551616]",
        '[{"time":"839:00:00"}]',
        '[{"timestamp":"2024-01-01T00:00:00"}]',
        '[{"datetime":"2024-01-01T00:00:00+02:00"}]',
        '[{"base64":"***"}]',
        '[{"set":[1]}]',
        '[{"uuid":"x"}]',
        "[[1]]",
    ],
)
def test_bad_json_values_are_refused(image: str) -> None:
    value = (
        '{"row":{"source":"a","ts":1,"op":"insert","schema":"d","table":"t","schema_id":1,'
        '"primary_key":[],"before":null,"after":' + image + ',"txn":{"id":"x","index":0,'
        '"count":null},"position":{"file":"f","offset":4,"gtid":null}}}'
    )
    with pytest.raises(ProtocolError):
        decode(value.encode(), [("rowbus-encoding", b"json")], POS)


def test_an_image_whose_arrays_disagree_with_its_kinds_is_refused() -> None:
    from rowbus.protocol.codec import fastpath
    from rowbus.protocol.codec.image import join_generic

    for join in (fastpath.join, join_generic):
        with pytest.raises(ProtocolError, match="fewer values"):
            join(b"\x01\x01", [1], [], [], [], [])
        with pytest.raises(ProtocolError, match="more values"):
            join(b"\x01", [1, 2], [], [], [], [])
        with pytest.raises(ProtocolError, match="unknown value kind"):
            join(b"\x63", [], [], [], [], [])
        with pytest.raises(ProtocolError):
            join(b"\x07", [10**9], [], [], [], [])  # a date past year 9999
        with pytest.raises(ProtocolError):
            join(b"\x04", [], [], [], ["Infinity"], [])
        with pytest.raises(ProtocolError):
            join(b"\x02", [], [5], [], [], [])  # an unsigned slot below 2**63


def test_a_row_with_images_that_do_not_fit_its_op_is_refused() -> None:
    with pytest.raises(ValueError, match="an insert has only after"):
        RowChange(
            source="a",
            ts=1,
            op=Op.INSERT,
            schema="d",
            table="t",
            schema_id=1,
            primary_key=(),
            before=(1,),
            after=(1,),
            txn=TxnRef("x", 0),
            position=BinlogPosition("f", 4),
        )


def test_avro_of_a_newer_minor_is_refused_without_its_schema() -> None:
    value, headers = encode(ROW, Encoding.AVRO)
    headers = [(k, b"1.99" if k == "rowbus-version" else v) for k, v in headers]
    with pytest.raises(ProtocolError, match=r"written by protocol 1\.99"):
        decode(value, headers, POS)


@pytest.mark.parametrize("kind", ["ddl", "schema"])
@pytest.mark.parametrize("suffix", ["pb", "avro", "json"])
def test_values_of_protocol_1_0_still_decode(kind: str, suffix: str) -> None:
    """1.1 only adds fields: a 1.0 value (Avro: read with the 1.0 writer schema) decodes, the new
    fields at their defaults."""
    from pathlib import Path

    import rowbus.protocol

    data = (
        Path(rowbus.protocol.__file__).parent / "testdata" / "v1.0" / f"{kind}.{suffix}"
    ).read_bytes()
    enc = {"pb": b"protobuf", "avro": b"avro", "json": b"json"}[suffix]
    headers = [("rowbus-version", b"1.0"), ("rowbus-encoding", enc), ("rowbus-kind", kind.encode())]
    record = decode(data, headers, POS)
    table = record.table_schema  # type: ignore[union-attr]
    assert table is not None and table.indexes == ()
    assert all(c.default is None and c.collation is None for c in table.columns)
    if kind == "ddl":
        assert record.kind is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "column",
    [
        '{"name":5,"type":"int","unsigned":false,"nullable":true}',
        '{"name":"a","type":"int","unsigned":"no","nullable":true}',
        '{"name":"a","type":"int","unsigned":false,"nullable":true,"length":"8"}',
        '{"name":"a","type":"enum","unsigned":false,"nullable":true,"elements":[1]}',
        "[]",
    ],
)
def test_json_table_schemas_with_wrong_types_are_refused(column: str) -> None:
    value = (
        '{"schema":{"schema_id":1,"source":"a","ts":1,"table_schema":{"schema":"s","table":"t",'
        '"columns":[' + column + '],"primary_key":[]}}}'
    )
    with pytest.raises(ProtocolError):
        decode(value.encode(), [("rowbus-encoding", b"json")], POS)


@pytest.mark.parametrize("encoding", list(Encoding), ids=lambda e: e.value)
def test_encoding_something_that_is_not_a_record_is_refused(encoding: Encoding) -> None:
    with pytest.raises(ProtocolError, match="is not a rowbus record"):
        encode(object(), encoding)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["row_insert", "checkpoint", "heartbeat"])
@pytest.mark.parametrize("suffix", ["pb", "avro", "json"])
def test_values_of_protocol_1_1_still_decode(kind: str, suffix: str) -> None:
    """1.2 only adds the upstream of a position and the checkpoint's upstream server: a 1.1
    value decodes with upstream 0 (Avro: read with the 1.1 writer schema)."""
    from pathlib import Path

    import rowbus.protocol

    data = (
        Path(rowbus.protocol.__file__).parent / "testdata" / "v1.1" / f"{kind}.{suffix}"
    ).read_bytes()
    enc = {"pb": b"protobuf", "avro": b"avro", "json": b"json"}[suffix]
    name = kind.partition("_")[0].encode()
    headers = [("rowbus-version", b"1.1"), ("rowbus-encoding", enc), ("rowbus-kind", name)]
    record = decode(data, headers, POS)
    assert record.position.upstream == 0  # type: ignore[union-attr]
    if kind == "checkpoint":
        assert record.upstream_server is None  # type: ignore[union-attr]


@pytest.mark.parametrize("suffix", ["pb", "avro", "json"])
def test_checkpoints_of_protocol_1_2_still_decode(suffix: str) -> None:
    """1.3 adds `ReaderCheckpoint.snapshot` at the end: a 1.2 checkpoint (Avro: read with the
    1.2 writer schema) decodes with no snapshot."""
    from pathlib import Path

    import rowbus.protocol

    data = (
        Path(rowbus.protocol.__file__).parent / "testdata" / "v1.2" / f"checkpoint.{suffix}"
    ).read_bytes()
    enc = {"pb": b"protobuf", "avro": b"avro", "json": b"json"}[suffix]
    headers = [("rowbus-version", b"1.2"), ("rowbus-encoding", enc), ("rowbus-kind", b"checkpoint")]
    record = decode(data, headers, POS)
    assert isinstance(record, ReaderCheckpoint)
    assert record.snapshot is None and record.epoch == 3


@pytest.mark.parametrize("version", ["1.3", "1.4"])
@pytest.mark.parametrize("suffix", ["pb", "avro", "json"])
def test_ddl_of_older_protocols_still_decodes(suffix: str, version: str) -> None:
    """1.4 adds `DdlChange.sql_mode` and `timestamp_us`, 1.5 `time_zone`, each at the end: an
    older DDL (Avro: read with its version's writer schema) decodes with the later fields
    unknown, its other fields intact."""
    from pathlib import Path

    import rowbus.protocol

    data = (
        Path(rowbus.protocol.__file__).parent / "testdata" / f"v{version}" / f"ddl.{suffix}"
    ).read_bytes()
    enc = {"pb": b"protobuf", "avro": b"avro", "json": b"json"}[suffix]
    headers = [
        ("rowbus-version", version.encode()),
        ("rowbus-encoding", enc),
        ("rowbus-kind", b"ddl"),
    ]
    record = decode(data, headers, POS)
    assert isinstance(record, DdlChange)
    assert record.time_zone is None
    if version == "1.3":
        assert record.sql_mode is None and record.timestamp_us is None
    else:
        assert record.sql_mode is not None and record.timestamp_us == 1_764_000_000_123_456
    assert record.kind is DdlKind.ALTER_TABLE
    assert record.statement == "ALTER TABLE all_types ADD COLUMN gone VARCHAR(8)"


def test_a_snapshot_row_is_shaped_like_an_insert() -> None:
    common: dict[str, object] = {
        "source": "s",
        "ts": 1,
        "schema": "d",
        "table": "t",
        "schema_id": 1,
        "primary_key": ("id",),
        "txn": TxnRef("snapshot:d.t:0", 0),
        "position": BinlogPosition("b.000001", 4),
    }
    RowChange(op=Op.READ, before=None, after=(1,), **common)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RowChange(op=Op.READ, before=(1,), after=(1,), **common)  # type: ignore[arg-type]


def test_json_escapes_only_what_json_requires_and_reads_missing_optionals_as_defaults() -> None:
    """PROTOCOL.md §5.3, byte for byte: `"`, `\\` and control characters escaped (short forms
    where JSON has them, lowercase `\\u00xx` else); `/`, `<`, `>`, `&`, DEL, U+2028 and
    non-ASCII as themselves. And a missing optional member reads as a present null."""
    from rowbus.protocol.codec import jsonc

    ev = DdlChange(
        source="a",
        ts=1,
        schema="d",
        table="t",
        statement="ALTER TABLE t COMMENT '\"\\\b\t\n\f\r\x01</&>\x7f\u2028é'",
        table_schema=None,
        position=BinlogPosition("f", 4),
    )
    text = jsonc.encode(ev).decode("utf-8")
    assert (
        '"statement":"ALTER TABLE t COMMENT \'\\"\\\\\\b\\t\\n\\f\\r\\u0001</&>\x7f\u2028é\'"'
        in text
    )
    assert '"time_zone":null' in text
    assert decode(text.encode(), [("rowbus-encoding", b"json")], POS) == ev
    missing = text.replace(',"time_zone":null', "").replace(',"sql_mode":null', "")
    assert decode(missing.encode(), [("rowbus-encoding", b"json")], POS) == ev
