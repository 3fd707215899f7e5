"""A transaction published in fragments (PROTOCOL.md §9.1): one ts, indexes across fragments,
the count only on the last fragment, watermarks held below it, and a restart that goes on
without publishing a committed fragment again."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.producer.assembler import RowItem, Transaction
from rowbus.producer.batch import Batcher
from rowbus.producer.fragments import FragmentMismatchError
from rowbus.protocol.codec import decode
from rowbus.protocol.events import BinlogPosition, Op, ReaderCheckpoint, Resolved, RowChange
from rowbus.protocol.hlc import HybridClock
from tests.unit.producer.test_batch import T, batcher

GTID = "0-1-7"
START_TS = 5 << 16 | 3


def _rows(first: int, n: int, offset: int) -> list[RowItem]:
    pos = BinlogPosition("bin.1", offset, GTID)
    return [RowItem(Op.INSERT, T, None, (i, "x", None), pos) for i in range(first, first + n)]


def _publish(b: Batcher, groups: list[list[RowItem]], fragments: int) -> list[object]:
    """Stream the first `fragments` groups, then add the rest as the transaction's end;
    the records of every commit (each flush a Kafka transaction), decoded."""
    out: list[object] = []
    for group in groups[:fragments]:
        b.stream(GTID, GTID, group, now=0.0)
        b.add_resolved()
        out.extend(decode(v, h) for _, _, _, v, h in b.take().records)
    rest = [r for g in groups[fragments:] for r in g]
    b.add(Transaction(GTID, GTID, BinlogPosition("bin.1", 9999, GTID), 1, rest), now=0.0)
    b.add_resolved()
    out.extend(decode(v, h) for _, _, _, v, h in b.take().records)
    return out


def _record(position: BinlogPosition, ts: int) -> ReaderCheckpoint:
    return ReaderCheckpoint(
        source="src",
        position=position,
        gtid_set=None,
        ts=ts,
        offsets=(),
        reader_id="r",
        epoch=1,
    )


def _groups(sizes: list[int]) -> list[list[RowItem]]:
    groups, first = [], 0
    for n, size in enumerate(sizes):
        groups.append(_rows(first, size, 1000 + 100 * n))
        first += size
    return groups


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=2, max_size=6),
    data=st.data(),
)
def test_fragments_then_last_part(sizes: list[int], data: st.DataObject) -> None:
    fragments = data.draw(st.integers(1, len(sizes) - 1))
    b = batcher()
    b.clock = HybridClock(START_TS)
    out = _publish(b, _groups(sizes), fragments)
    rows = [r for r in out if isinstance(r, RowChange)]
    total = sum(sizes)
    assert [r.txn.index for r in rows] == list(range(total))
    assert {r.ts for r in rows} == {START_TS + 1}
    streamed = sum(sizes[:fragments])
    assert [r.txn.count for r in rows] == [None] * streamed + [total] * (total - streamed)
    marks = [r.ts for r in out if isinstance(r, Resolved)]
    # Resolved of the fragments stay below the transaction; the last one covers it.
    assert all(ts == START_TS for ts in marks[:-4]) and marks[-1] == START_TS + 1
    assert b.resume_ts == START_TS + 1


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=3, max_size=6), data=st.data())
def test_a_restart_between_fragments_publishes_each_event_once(
    sizes: list[int], data: st.DataObject
) -> None:
    groups = _groups(sizes)
    committed = data.draw(st.integers(1, len(sizes) - 2))
    first = batcher()
    first.clock = HybridClock(START_TS)
    published: list[RowChange] = []
    for group in groups[:committed]:
        first.stream(GTID, GTID, group, now=0.0)
        published.extend(
            r for _, _, _, v, h in first.take().records if isinstance(r := decode(v, h), RowChange)
        )
    assert first.resume_ts == START_TS  # what the checkpoint carries
    assert first.open_stream is not None and first.open_stream.last is not None
    fragment = _record(first.open_stream.last, first.resume_ts)
    # The restarted reader: clock from the checkpoint, the transaction read again from its start.
    second = batcher()
    second.clock = HybridClock(START_TS)
    second.resume_stream(fragment)
    more = data.draw(st.integers(committed, len(sizes) - 1))
    out = _publish(second, groups, more)
    published.extend(r for r in out if isinstance(r, RowChange))
    total = sum(sizes)
    assert sorted(r.txn.index for r in published) == list(range(total))
    assert [r.image[0] for r in sorted(published, key=lambda r: r.txn.index)] == list(range(total))
    assert {r.ts for r in published} == {START_TS + 1}
    assert {r.txn.count for r in published if r.txn.index == total - 1} == {total}


def test_another_transaction_than_the_fragment_record_names_is_refused() -> None:
    b = batcher()
    b.resume_stream(_record(BinlogPosition("bin.1", 50, GTID), 0))
    with pytest.raises(FragmentMismatchError, match="0-1-7"):
        b.stream("0-1-8", "0-1-8", _rows(0, 1, 60), now=0.0)
