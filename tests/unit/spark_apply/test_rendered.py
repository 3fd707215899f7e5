"""Rows rendered on the executors (`rowbus.spark_apply.rendered`): the literals are the
renderer's own, the driver's event is the record's, collapse and statements are the same
whether a row was rendered or decoded, and a rendered row is spilled as its record's bytes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rowbus.protocol.codec import (
    ENCODING_HEADER,
    KIND_HEADER,
    VERSION_HEADER,
    Encoding,
    decode,
    encode,
)
from rowbus.protocol.codec.fastpath import join, split
from rowbus.protocol.errors import ProtocolError
from rowbus.protocol.events import Op, RowChange
from rowbus.protocol.values import Value, ZeroDate
from rowbus.routing.routes import Router
from rowbus.spark_apply.changes import collapse
from rowbus.spark_apply.job import envelopes_of
from rowbus.spark_apply.literals import (
    SEP,
    LitImage,
    as_literals,
    image_text,
    literal,
    row_literal,
    row_of_literals,
)
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.rendered import (
    ROW_COLUMN,
    Wire,
    _native,
    native_row,
    read_row,
    render_image,
    rendered_row,
    row_event,
)
from rowbus.spark_apply.sink_spill import PieceSpill
from rowbus.spark_apply.source import KafkaRange, _append, append_messages, arrow_schema
from rowbus.spark_apply.table_writes import write_table
from rowbus.testing.messages import Message
from tests.unit.protocol.protocol_strategies import images, rows, values
from tests.unit.spark_apply.events import ddl, resolved, row, table


@given(images)
def test_an_image_renders_to_the_literals_of_its_values(image: tuple[Value, ...]) -> None:
    rendered = as_literals(image)
    assert type(rendered) is LitImage
    assert list(rendered) == [literal(v) for v in image]
    assert all(SEP not in lit for lit in rendered)
    assert row_of_literals(rendered) == row_literal(image)
    assert as_literals(rendered) is rendered


def _event(event: RowChange) -> RowChange:
    """What the driver builds from the text the executors render of `event` (generated names
    may hold NUL, which no real one does: such a row is decoded on the driver)."""
    text = rendered_row(event)
    if text is None:
        assert any(
            SEP in str(f)
            for f in (
                event.source,
                event.schema,
                event.table,
                event.txn.id,
                event.position.file,
                event.position.gtid or "",
            )
        )
    assume(text is not None)
    assert text is not None
    return row_event(text, event.source, event.ts, {})


@given(rows())
def test_the_driver_builds_the_records_event_with_rendered_images(event: RowChange) -> None:
    built = _event(event)
    for name in ("source", "ts", "op", "schema", "table", "schema_id", "primary_key"):
        assert getattr(built, name) == getattr(event, name)
    assert built.txn == event.txn
    assert built.position == event.position
    for mine, theirs in ((built.before, event.before), (built.after, event.after)):
        assert (mine is None) == (theirs is None)
        if theirs is not None:
            assert type(mine) is LitImage
            assert mine == as_literals(theirs)


@given(rows())
@settings(max_examples=50)
def test_a_rendered_row_is_spilled_as_its_records_bytes(event: RowChange) -> None:
    built = _event(event)
    value, _ = encode(event)
    wire: Wire = {id(built): (built, value)}
    spill = PieceSpill(7, None, wire)
    try:
        chunk = spill.write([(3, built)])
        assert list(spill.read(chunk)) == [(3, event)]
    finally:
        spill.close()


def test_a_rendered_row_without_its_bytes_is_never_encoded() -> None:
    event = row(1, after=(1, "a"))
    built = row_event(rendered_row(event) or "", event.source, event.ts, {})
    spill = PieceSpill(7)
    try:
        with pytest.raises(AssertionError, match="no record bytes"):
            spill.write([(0, built)])
    finally:
        spill.close()


class _Range:
    topic, partition = "t", 0


def _batch(events: list[Any]) -> Any:
    cols: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    for offset, event in enumerate(events):
        _append(cols, _Range(), Message.of(event, offset))  # type: ignore[arg-type]
    return pa.Table.from_batches([pa.RecordBatch.from_pydict(cols, schema=arrow_schema())])


def test_the_read_renders_protobuf_rows_and_the_driver_never_decodes_them() -> None:
    events = [
        row(1, after=(1, "a")),
        row(2, Op.UPDATE, (1, "a"), (1, None)),
        row(3, Op.DELETE, (1, None)),
    ]
    wire: Wire = {}
    envs = envelopes_of(_batch(events), wire)
    assert [e.offset for e in envs] == [0, 1, 2]
    assert len(wire) == 3
    for env, event in zip(envs, events, strict=True):
        assert isinstance(env.event, RowChange)
        assert env.event.after == (as_literals(event.after) if event.after else None)
        assert decode(wire[id(env.event)][1], None) == event
    # Without a wire to record the bytes in, rows are decoded as before.
    assert [e.event for e in envelopes_of(_batch(events))] == events


def test_a_row_in_another_encoding_is_decoded_on_the_driver() -> None:
    from rowbus.protocol.codec import Encoding

    event = row(1, after=(1, "a"))
    msg = Message.of(event, 0, Encoding.JSON)
    cols: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    _append(cols, _Range(), msg)  # type: ignore[arg-type]
    assert cols[ROW_COLUMN] == [None]
    assert cols["kind"] == ["row"] and cols["encoding"] == ["json"]
    headers = dict(msg.header_list or [])
    assert headers[KIND_HEADER] == b"row" and ENCODING_HEADER in headers
    batch = pa.Table.from_batches([pa.RecordBatch.from_pydict(cols, schema=arrow_schema())])
    assert [e.event for e in envelopes_of(batch, {})] == [event]


class _Cursor:
    def __init__(self) -> None:
        self.sql: list[str] = []

    def execute(self, sql: str) -> int:
        self.sql.append(sql)
        return 1


TBL = table(columns=("id", "v"))
_ops = st.tuples(
    st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE, Op.READ]),
    st.integers(1, 3),
    st.integers(1, 3),
    values,
    values,
    st.booleans(),
)


@given(st.lists(_ops, max_size=25))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_statements_are_the_same_whether_rows_were_rendered_or_decoded(
    script: list[tuple[Op, int, int, Value, Value, bool]],
) -> None:
    """A step mixes rows the executors rendered with decoded ones (a stashed transaction read
    back): a key must be the same key in both forms, or a deletion and an upsert of one key
    were both written (deletions first: the row came back)."""
    decoded: list[Envelope] = []
    mixed: list[Envelope] = []
    for i, (op, old, new, v1, v2, render) in enumerate(script):
        before = None if op in (Op.INSERT, Op.READ) else (old, v1)
        after = None if op is Op.DELETE else (new, v2)
        event = row(i + 1, op, before, after, tbl=TBL)
        decoded.append(Envelope("t", 0, i, event))
        shown = _event(event) if render else event
        mixed.append(Envelope("t", 0, i, shown))
    assert _sql(mixed) == _sql(decoded)


def _sql(envs: list[Envelope]) -> list[str]:
    cur = _Cursor()
    for tc in collapse(envs, Router([]), lambda _sid: TBL).get(0, {}).values():
        write_table(cur, tc)
    return cur.sql


def test_the_native_renderer_is_built() -> None:
    """`make setup` builds it (setup.py); without it rendering falls back to Python."""
    assert _native is not None


_edges = st.sampled_from(
    [
        -0.0,
        5e-324,
        1.7976931348623157e308,
        1e16,
        1e-7,
        0.1,
        Decimal("-0.00"),
        Decimal("0"),
        Decimal("1E+3"),
        Decimal("00.5"),
        Decimal("-12.50"),
        "",
        "\x00\\'\"\n\r\x1a",
        "žluť 🐍",
        b"",
        b"\x00\xff",
        ZeroDate("0000-00-00 00:00:00.000"),
        dt.date(1, 1, 1),
        dt.date(9999, 12, 31),
        dt.datetime(1, 1, 1),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(1969, 12, 31, 23, 59, 59, 1),
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        -dt.timedelta(microseconds=1),
        dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
        frozenset({"b", "a"}),
        2**63,
        2**64 - 1,
        -(2**63),
        None,
    ]
)


@given(st.lists(st.one_of(values, _edges), min_size=1, max_size=12))
@settings(max_examples=500)
def test_the_native_renderer_writes_what_the_python_renderer_writes(image: list[Value]) -> None:
    """Byte for byte, for every value kind (protocol_strategies' values and edge values): where
    it answers, the native text is `image_text` of the decoded values; where it does not
    (None), `render_image` still renders them (in Python)."""
    cols = split(image)
    decoded = join(*cols)
    expected = image_text(decoded)
    text = _native.render(*cols)
    if text is not None:
        assert text == expected
    assert SEP.join(render_image(*cols)) == expected


def test_the_native_renderer_covers_w1_and_the_common_kinds() -> None:
    image = (
        1,
        -5,
        2**64 - 1,
        "it's",
        Decimal("235273930.92"),
        dt.datetime(2022, 11, 27, 9, 17, 55, 14753),
        dt.datetime(2022, 1, 1, tzinfo=dt.UTC),
        379615.2233237278,
        None,
        b"\x01",
        dt.date(2021, 11, 19),
        dt.timedelta(hours=-1, seconds=3),
        ZeroDate("2024-00-15"),
    )
    assert _native.render(*split(image)) == image_text(image)


def test_a_malformed_image_is_left_to_the_python_decoder() -> None:
    """Arrays that do not match the kinds: the native renderer answers None and the Python path
    raises what decoding raises."""
    kinds, ints, uints, doubles, strings, blobs = split((1, "a"))
    assert _native.render(kinds, [*ints, 2], uints, doubles, strings, blobs) is None
    assert _native.render(kinds + b"\x01", ints, uints, doubles, strings, blobs) is None
    with pytest.raises(ProtocolError):
        render_image(kinds, [*ints, 2], uints, doubles, strings, blobs)


def test_a_row_whose_text_would_not_split_back_is_decoded_on_the_driver() -> None:
    assert rendered_row(row(1, after=(1, "a"), tbl=table(name="t\x00"))) is None
    assert rendered_row(row(1, after=(1, "a\x00"))) is not None  # escaped: \\0


def _python_row(value: bytes, headers: Any) -> tuple[str, int, str | None]:
    event = read_row(value, headers, "t[0]@0")
    assert isinstance(event, RowChange)
    return event.source, event.ts, rendered_row(event)


_plain = st.from_regex(r"[ -~]{1,12}", fullmatch=True)


@given(
    rows(),
    st.lists(st.one_of(values, _edges), min_size=1, max_size=8),
    st.lists(_plain, max_size=4).map(tuple),
    _plain,
)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_a_row_record_read_natively_is_what_decoding_and_rendering_give(
    event: RowChange, image: list[Value], key: tuple[str, ...], name: str
) -> None:
    """`native_row` (the record's bytes straight to its text) equals decoding the record and
    rendering the event, for generated rows (any names, positions, txns, every op) and the same
    with printable names and keys (which it reads natively) and images of every value kind and
    the edge values; where it answers None the Python path does it."""
    shaped = RowChange(
        **{
            **{f: getattr(event, f) for f in event.__dataclass_fields__},
            "schema": name,
            "table": name[::-1],
            "primary_key": key,
            "before": None if event.before is None else tuple(image),
            "after": None if event.after is None else tuple(image),
        }
    )
    for e in (event, shaped):
        value, headers = encode(e)
        got = native_row(value, headers)
        if got is not None:
            assert got == _python_row(value, headers)


def test_the_native_read_covers_w1_rows_and_leaves_the_rest_to_python() -> None:
    image: tuple[Value, ...] = (
        1, -5, 2**64 - 1, "it's", Decimal("235273930.92"),
        dt.datetime(2022, 11, 27, 9, 17, 55, 14753), 379615.2233237278, None, b"\x01",
        dt.date(2021, 11, 19), dt.timedelta(hours=-1, seconds=3),
    )  # fmt: skip
    events = [
        row(1, after=image, tbl=table(columns=("id", "v", "w"), key=("id", "v"))),
        row(2, Op.UPDATE, image, image[::-1]),
        row(3, Op.DELETE, image),
        row(4, Op.READ, after=image),
    ]
    for event in events:
        value, headers = encode(event)
        assert native_row(value, headers) == _python_row(value, headers)
        assert native_row(value, None) == _python_row(value, headers)  # sniffed
    value, headers = encode(events[0])
    # A SET is left to Python, as are a corrupt value, other kinds and other encodings.
    set_value, set_headers = encode(row(5, after=(1, frozenset({"a"}))))
    assert native_row(set_value, set_headers) is None
    corrupt = value[:10] + bytes([value[10] ^ 1]) + value[11:]
    assert native_row(corrupt, headers) is None
    with pytest.raises(ProtocolError, match="CRC"):
        read_row(corrupt, headers, "t[0]@0")
    assert native_row(value[:-1], headers) is None
    from rowbus.protocol.codec import Encoding
    from rowbus.protocol.events import Resolved

    assert native_row(*encode(Resolved(source="s", ts=1))) is None
    assert native_row(*encode(events[0], Encoding.JSON)) is None
    wrong_kind = [(k, b"ddl" if k == KIND_HEADER else v) for k, v in headers]
    assert native_row(value, wrong_kind) is None


def _message(event: Any, offset: int, how: str) -> Message:
    msg = Message.of(
        event, offset, Encoding.JSON if how in ("json", "bare json") else Encoding.PROTOBUF
    )
    if how in ("bare", "bare json"):
        msg.header_list = None  # sniffed
    elif how == "corrupt":
        assert msg.data is not None
        msg.data = msg.data[:-1] + bytes([msg.data[-1] ^ 1])
    elif how == "version2":
        msg.header_list = [
            (k, b"2.0" if k == VERSION_HEADER else v) for k, v in msg.header_list or []
        ]
    return msg


_plain_rows = st.builds(
    lambda ts, op, v: row(
        ts,
        op,
        None if op in (Op.INSERT, Op.READ) else (ts, "a"),
        None if op is Op.DELETE else (ts, v),
    ),
    st.integers(1, 2**62),
    st.sampled_from(list(Op)),
    st.one_of(values, _edges),
)
_records = st.one_of(
    rows(),
    _plain_rows,
    _plain_rows,
    st.builds(resolved, st.integers(1, 2**62)),
    st.builds(ddl, st.integers(1, 2**62), st.just("CREATE TABLE t (id INT)")),
)
_hows = st.sampled_from(
    ["headers", "headers", "headers", "bare", "json", "bare json", "corrupt", "version2"]
)


@given(st.lists(st.tuples(_records, _hows), max_size=30), st.integers(0, 35))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_consumed_list_is_read_as_the_python_reader_reads_it(
    stream: list[tuple[Any, str]], end: int
) -> None:
    """`source.append_messages` (rows and watermarks natively, the rest in Python) gives the
    columns `_append` gives message by message, stops at `end`, and raises where the Python
    reader raises (a corrupt or unreadable record: at that record, with its position)."""
    try:
        msgs = [_message(e, offset, how) for offset, (e, how) in enumerate(stream)]
    except ProtocolError:  # a generated value no record can hold
        assume(False)
    expected: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    failure: str | None = None
    want_position = 0
    for m in msgs:
        if m.offset() >= end:
            want_position = end
            break
        try:
            _append(expected, _Range(), m)  # type: ignore[arg-type]
        except ProtocolError as exc:
            failure = str(exc)
            break
        want_position = m.offset() + 1
    got: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    r = KafkaRange("t", 0, 0, end)
    if failure is not None:
        with pytest.raises(ProtocolError) as raised:
            append_messages(got, r, msgs, 0)
        assert str(raised.value) == failure
    else:
        assert append_messages(got, r, msgs, 0) == want_position
    assert got == expected


def test_a_message_with_an_error_raises_after_those_before_it() -> None:
    events = [row(1, after=(1, "a")), resolved(5), row(2, after=(2, "b"))]
    msgs = [Message.of(e, offset) for offset, e in enumerate(events)]
    msgs[2].failure = "broker says no"
    cols: dict[str, list[Any]] = {f.name: [] for f in arrow_schema()}
    with pytest.raises(RuntimeError, match=r"t\[0\]: broker says no"):
        append_messages(cols, KafkaRange("t", 0, 0, 10), msgs, 0)
    assert cols["offset"] == [0, 1]
    assert cols["kind"] == ["row", "resolved"]
    assert cols[ROW_COLUMN][1] is None and cols[ROW_COLUMN][0] is not None


def test_the_apply_jobs_readers_refuse_debezium_records() -> None:
    from rowbus.protocol.codec import ENCODING_HEADER
    from rowbus.protocol.debezium import DebeziumOptions, DebeziumRenderer
    from rowbus.protocol.errors import ProtocolError
    from rowbus.spark_apply import rendered
    from tests.unit.protocol.test_protocol_debezium import TABLE, _row

    value = DebeziumRenderer(DebeziumOptions("dbz")).value(
        _row(Op.INSERT, None, (1, "a")), TABLE, 0
    )
    headers = [(ENCODING_HEADER, b"debezium")]
    assert rendered.native_row(value, headers) is None  # not taken natively: decoded, and ...
    with pytest.raises(ProtocolError, match="debezium encoding"):
        rendered.read_row(value, headers, "dbz.shop.orders[1]@9")  # ... refused there
