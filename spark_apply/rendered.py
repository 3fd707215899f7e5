"""Row records rendered on the executors: their header fields and their images as SQL literals.

The source's read (`source.read_range`, on the executors) decodes each protobuf row record
and adds `ROW_COLUMNS` to it (`rendered_row`): what the merger orders by (source, ts, txn,
binlog position, table) and the row's images rendered by `literals.image_text`. The driver
builds from those columns a `RowChange` whose images are `literals.LitImage`s (`row_event`),
never decoding a value: the planner orders it like any row, collapse keys it by its literals
and the statements join them. Such an event must never be encoded (its images are not
values): the spill writes the record's own protobuf bytes for it instead (`Wire`,
`pieces.PieceSpill`), which decode to the very event the record holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rowbus.protocol.codec import construct, decode, fastpath
from rowbus.protocol.events import Op, Record, RowChange
from rowbus.spark_apply.literals import LitImage, as_literals, image_text, lit_image

try:
    from rowbus.spark_apply import _literals as _native  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the same text, in Python
    _native = None

ROW_COLUMNS = (
    "op",
    "db",
    "tbl",
    "schema_id",
    "pk",
    "txn_id",
    "txn_index",
    "txn_count",
    "pos_file",
    "pos_offset",
    "gtid",
    "upstream",
    "before",
    "after",
)
"""Null for every record but a rendered row."""
ROW_TYPES = (
    "STRING",
    "STRING",
    "STRING",
    "BIGINT",
    "STRING",
    "STRING",
    "BIGINT",
    "BIGINT",
    "STRING",
    "BIGINT",
    "STRING",
    "BIGINT",
    "STRING",
    "STRING",
)
NO_ROW: tuple[None, ...] = (None,) * len(ROW_COLUMNS)

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


def read_row(value: bytes, headers: Any, position: str) -> Record:
    """The record in a Kafka value, a protobuf row's images rendered (`render_image`)."""
    return decode(value, headers, position, image=render_image)


def is_protobuf(encoding: str | None, value: bytes) -> bool:
    """Whether `value` is protobuf (as `codec.decode` sniffs it): the spill's own encoding."""
    return encoding == "protobuf" or (encoding is None and value[:1] != b"{")


def rendered_row(event: RowChange) -> tuple[Any, ...]:
    """The `ROW_COLUMNS` of a row event (`NO_ROW` for an image of no value: it is decoded)."""
    p, t = event.position, event.txn
    before, after = event.before, event.after
    if (before is not None and not before) or (after is not None and not after):
        return NO_ROW
    return (
        event.op.value,
        event.schema,
        event.table,
        event.schema_id,
        _key_text(event.primary_key),
        t.id,
        t.index,
        t.count,
        p.file,
        p.offset,
        p.gtid,
        p.upstream,
        image_text(before) if before is not None else None,
        image_text(after) if after is not None else None,
    )


_OPS = {op.value: op for op in Op}
_KEY_TEXTS: dict[tuple[str, ...], str] = {}


def _key_text(key: tuple[str, ...]) -> str:
    text = _KEY_TEXTS.get(key)
    if text is None:
        if len(_KEY_TEXTS) > 4096:  # bounded: a worker may see many tables over its life
            _KEY_TEXTS.clear()
        text = _KEY_TEXTS[key] = json.dumps(key)
    return text


def row_event(cols: dict[str, list[Any]], i: int, keys: dict[str, tuple[str, ...]]) -> RowChange:
    """The event of row `i` of rendered columns (`keys`: a cache of primary-key tuples)."""
    pk = cols["pk"][i]
    key = keys.get(pk)
    if key is None:
        key = keys[pk] = tuple(json.loads(pk))
    before, after = cols["before"][i], cols["after"][i]
    return construct.row_change(
        cols["source"][i],
        cols["ts"][i],
        _OPS[cols["op"][i]],
        cols["db"][i],
        cols["tbl"][i],
        cols["schema_id"][i],
        key,
        lit_image(before) if before is not None else None,
        lit_image(after) if after is not None else None,
        construct.txn_ref(cols["txn_id"][i], cols["txn_index"][i], cols["txn_count"][i]),
        construct.binlog_position(
            cols["pos_file"][i], cols["pos_offset"][i], cols["gtid"][i], cols["upstream"][i]
        ),
    )
