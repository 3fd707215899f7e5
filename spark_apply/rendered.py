"""Row records rendered on the executors: their header fields and their images as SQL literals.

The source's read (`source.read_range`, on the executors) decodes each protobuf row record,
its images rendered natively from their wire columns (`render_image`, `_literals.c`), and
adds one text column to it (`rendered_row`): what the merger orders by (op, table, txn,
binlog position; source and ts are columns of every record) and the row's literals. The driver
builds from those columns a `RowChange` whose images are `literals.LitImage`s (`row_event`),
never decoding a value: the planner orders it like any row, collapse keys it by its literals
and the statements join them. Such an event must never be encoded (its images are not
values): the spill writes the record's own protobuf bytes for it instead (`Wire`,
`sink_spill.PieceSpill`), which decode to the very event the record holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rowbus.protocol.codec import ENCODING_HEADER, construct, decode, fastpath, protobuf_kind
from rowbus.protocol.events import Op, Record, RowChange
from rowbus.spark_apply.literals import SEP, LitImage, as_literals, image_text, lit_image

try:
    from rowbus.spark_apply import _literals as _native  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the same text, in Python
    _native = None

ROW_COLUMN = "row"
"""The source's column of a rendered row's text (`rendered_row`); null for other records.

One string column, not one per field: the batch crosses the JVM twice (the Python worker's
Arrow into Spark's rows, then `toArrow` to the driver), and each column costs per record."""
HEADER_FIELDS = 14
Wire = dict[int, tuple[Any, bytes]]
"""id(event) → (event, the protobuf bytes of its record), for the events `row_event` built:
what the spill writes for them. The entry holds the event, so its id is not reused."""


def render_image(
    kinds: bytes,
    ints: Sequence[int],
    uints: Sequence[int],
    doubles: Sequence[float],
    strings: Sequence[str],
    blobs: Sequence[bytes],
) -> LitImage:
    """An image's literals from its wire columns (`codec.decode(image=…)`): natively where
    `_literals.render` covers the image, else decoded and rendered in Python (which raises
    what decoding raises)."""
    if _native is not None:
        text = _native.render(kinds, ints, uints, doubles, strings, blobs)
        if text is not None:
            return lit_image(text)
    return as_literals(fastpath.join(kinds, ints, uints, doubles, strings, blobs))


def encoding_of(headers: Any) -> str | None:
    """The source's `encoding` column: a record's ``rowbus-encoding`` header, None without."""
    return (dict(headers or []).get(ENCODING_HEADER) or b"").decode() or None


def classify(headers: Any) -> tuple[str | None, str | None]:
    """(the `encoding` column, `protobuf_kind`) of a record's headers: what the native reader
    (`_literals.append_records`, `native_row`) asks once per distinct headers."""
    return encoding_of(headers), protobuf_kind(headers or [])


def native_row(value: bytes, headers: Any) -> tuple[str, int, str] | None:
    """(source, ts, `rendered_row` text) of a protobuf row record, read natively from its bytes
    (`_literals.row_text`: no Python object per field or value), or None: the caller decodes
    it (`read_row`), as it does every record the native reader leaves (another kind, a field or
    value it does not take, a corrupt value: the decoding raises with the position). The
    executors read whole lists of messages the same way (`_literals.append_records`)."""
    encoding, kind = classify(headers)
    if _native is None or kind not in ("", "row") or not is_protobuf(encoding, value):
        return None
    got: tuple[str, int, str] | None = _native.row_text(value)
    return got


def append_natively(
    msgs: list[Any], start: int, end: int, cols: tuple[list[Any], ...], topic: str, partition: int
) -> int:
    """Appends to the source's columns (`cols`, in `source.SCHEMA`'s order) the messages from
    ``msgs[start]`` on that the native reader takes whole (protobuf rows and Resolved records
    below offset `end`), and returns the index of the first it did not take (`start` without
    the extension): the caller reads that one itself, then calls again after it."""
    if _native is None:
        return start
    got: int = _native.append_records(msgs, start, end, cols, topic, partition, classify)
    return got


def read_row(value: bytes, headers: Any, position: str) -> Record:
    """The record in a Kafka value, a protobuf row's images rendered (`render_image`)."""
    return decode(value, headers, position, image=render_image)


def is_protobuf(encoding: str | None, value: bytes) -> bool:
    """Whether `value` is protobuf (as `codec.decode` sniffs it): the spill's own encoding."""
    return encoding == "protobuf" or (encoding is None and value[:1] != b"{")


def rendered_row(event: RowChange) -> str | None:
    """A row event's header fields and literals as one `SEP`-joined text (None: an image of
    no value, or a field or literal holding `SEP`, which no real one does: it is decoded)."""
    p, t = event.position, event.txn
    before, after = event.before, event.after
    if (before is not None and not before) or (after is not None and not after):
        return None
    head = (
        event.op.value,
        event.schema,
        event.table,
        str(event.schema_id),
        _key_text(event.primary_key),
        t.id,
        str(t.index),
        "" if t.count is None else str(t.count),
        p.file,
        str(p.offset),
        "" if p.gtid is None else "=" + p.gtid,
        str(p.upstream),
        "-1" if before is None else str(len(before)),
        "",  # reserved
    )
    images = [i for i in (before, after) if i is not None]
    text = SEP.join([*head, *map(image_text, images)])
    if text.count(SEP) != HEADER_FIELDS - 1 + sum(map(len, images)):
        return None  # a field or a literal holds SEP (a zero date's text could, in theory)
    return text


_OPS = {op.value: op for op in Op}
_DELETE = Op.DELETE
_KEY_TEXTS: dict[tuple[str, ...], str] = {}


def _key_text(key: tuple[str, ...]) -> str:
    text = _KEY_TEXTS.get(key)
    if text is None:
        if len(_KEY_TEXTS) > 4096:  # bounded: a worker may see many tables over its life
            _KEY_TEXTS.clear()
        text = _KEY_TEXTS[key] = json.dumps(key)
    return text


def row_event(text: str, source: str, ts: int, keys: dict[str, tuple[str, ...]]) -> RowChange:
    """The event of a rendered row's text (`keys`: a cache of primary-key tuples)."""
    parts = text.split(SEP)
    (op_name, db, tbl, schema_id, pk, txn_id, index, count, file, offset, gtid, upstream,
     nb, _) = parts[:HEADER_FIELDS]  # fmt: skip
    key = keys.get(pk)
    if key is None:
        key = keys[pk] = tuple(json.loads(pk))
    op = _OPS[op_name]
    n = int(nb)
    start = HEADER_FIELDS
    before = None
    if n >= 0:
        before = LitImage(parts[start : start + n])
        start += n
    after = LitImage(parts[start:]) if op is not _DELETE else None
    return construct.row_change(
        source,
        ts,
        op,
        db,
        tbl,
        int(schema_id),
        key,
        before,
        after,
        construct.txn_ref(txn_id, int(index), int(count) if count else None),
        construct.binlog_position(file, int(offset), gtid[1:] if gtid else None, int(upstream)),
    )
