"""Random protocol traffic for the merger tests: sources, transactions, partitions, watermarks,
with replays (duplicates and leaked aborted records) injected, plus the sorted reference."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from rowbus.merge.merger import ddl_txn_id, marker_txn_id
from rowbus.protocol.events import (
    BinlogPosition,
    ColumnSchema,
    DdlChange,
    Event,
    MarkerMode,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from rowbus.testing import events

TABLE = TableSchema("db", "t", (ColumnSchema("id", "bigint"), ColumnSchema("v", "int")), ("id",))
BASE_TS = 1_700_000_000_000 << 16


@dataclass
class Scenario:
    lanes: list[tuple[str, int, str]]
    partitions: dict[tuple[str, int], list[Event]]
    reference: list[tuple[str, str, int, list[Event]]]
    flat: list[tuple[str, int, int, Event]] = field(default_factory=list)


def row(source: str, ts: int, txn: str, index: int, count: int | None, offset: int) -> RowChange:
    return events.row(
        ts,
        after=(offset * 10 + index, index),
        source=source,
        tbl=TABLE,
        index=index,
        count=count,
        txn=txn,
        position=BinlogPosition("bin.000001", offset, txn),
    )


def ddl(source: str, ts: int, offset: int) -> DdlChange:
    return events.ddl(
        ts,
        f"ALTER TABLE t COMMENT '{offset}'",
        TABLE,
        source=source,
        position=BinlogPosition("bin.000001", offset),
    )


def marker(source: str, ts: int, offset: int, end: bool) -> SnapshotBegin | SnapshotEnd:
    """A snapshot marker (PROTOCOL.md §9.7): a barrier like a DDL."""
    at = BinlogPosition("bin.000001", offset)
    snapshot = f"snapshot:0/bin.000001:{offset}:db.t"
    if end:
        return SnapshotEnd(
            source=source,
            ts=ts,
            schema=TABLE.schema,
            table=TABLE.table,
            snapshot=snapshot,
            mode=MarkerMode.REFRESH,
            position=at,
            txn=TxnRef(f"{snapshot}:end", 0),
            rows=3,
        )
    return SnapshotBegin(
        source=source,
        ts=ts,
        schema=TABLE.schema,
        table=TABLE.table,
        snapshot=snapshot,
        mode=MarkerMode.REPLACE,
        position=at,
        txn=TxnRef(f"{snapshot}:begin", 0),
    )


@st.composite
def scenarios(draw: st.DrawFn, max_sources: int = 3, max_txns: int = 8) -> Scenario:
    n_topics = draw(st.integers(1, 2))
    topics = {f"topic{i}": draw(st.integers(1, 3)) for i in range(n_topics)}
    sources = [f"s{i}" for i in range(draw(st.integers(1, max_sources)))]
    lanes: list[tuple[str, int, str]] = []
    # per lane: that source's records on that partition, in order
    per_lane: dict[tuple[str, int, str], list[Event]] = {}
    reference: list[tuple[str, str, int, list[Event]]] = []
    last_ts = BASE_TS
    for source in sources:
        own = draw(st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))
        src_lanes = [(t, p, source) for t in own for p in range(topics[t])]
        lanes += src_lanes
        for lane in src_lanes:
            per_lane[lane] = []
        ts = BASE_TS + draw(st.integers(0, 50))
        offset = 4
        for k in range(draw(st.integers(0, max_txns))):
            ts += draw(st.integers(1, 3))
            if draw(st.integers(0, 9)) == 0:
                # a barrier: a DDL, or (1.5) a snapshot marker
                kind = draw(st.integers(0, 3))
                event: Event
                if kind < 2:
                    event = ddl(source, ts, offset)
                    barrier_id = ddl_txn_id(event)
                else:
                    mark = marker(source, ts, offset, kind == 3)
                    event, barrier_id = mark, marker_txn_id(mark)
                offset += 100
                broadcast = draw(st.booleans())
                targets = src_lanes if broadcast else [draw(st.sampled_from(src_lanes))]
                for lane in targets:
                    per_lane[lane].append(event)
                reference.append((source, barrier_id, ts, [event]))
            else:
                txn = f"{source}-txn{k}"
                n = draw(st.integers(1, 4))
                count = n if draw(st.booleans()) else None
                events: list[Event] = []
                for i in range(n):
                    offset += draw(st.integers(0, 1)) * 50  # rows may share a rows-event offset
                    ev = row(source, ts, txn, i, count, offset)
                    events.append(ev)
                    per_lane[draw(st.sampled_from(src_lanes))].append(ev)
                offset += 100
                reference.append((source, txn, ts, events))
            if draw(st.booleans()):
                for lane in src_lanes:
                    per_lane[lane].append(Resolved(source=source, ts=ts))
        last_ts = max(last_ts, ts)
    # every source ends with a watermark past everything (readers keep sending heartbeats)
    for lane in lanes:
        per_lane[lane].append(Resolved(source=lane[2], ts=last_ts + 1))
    # replays: a slice of a lane repeated right after itself (a restarted reader re-publishing,
    # or an aborted batch the broker leaked followed by its committed copy)
    for lane, records in per_lane.items():
        for _ in range(draw(st.integers(0, 2))):
            if not records:
                break
            i = draw(st.integers(0, len(records) - 1))
            j = draw(st.integers(i + 1, len(records)))
            records[j:j] = records[i:j]
        per_lane[lane] = records
    # each partition interleaves its sources' lanes at random, keeping each lane's order
    partitions: dict[tuple[str, int], list[Event]] = {}
    for t, n in topics.items():
        for p in range(n):
            queues = [list(per_lane[lane]) for lane in per_lane if lane[:2] == (t, p)]
            merged: list[Event] = []
            while any(queues):
                q = draw(st.sampled_from([q for q in queues if q]))
                merged.append(q.pop(0))
            partitions[t, p] = merged
    reference.sort(key=lambda r: (r[2], r[0], r[3][0].position.offset))
    return Scenario(lanes, partitions, reference)
