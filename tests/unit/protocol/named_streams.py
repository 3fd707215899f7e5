"""Writes the conformance kit's named stream vectors (`protocol/testdata/streams/named_*.json`,
PROTOCOL.md §10.1): ``python -m tests.unit.protocol.named_streams``.

Each is a stream a reader publishes in one of §9's harder cases, built by hand here: a
fragmented transaction (§9.1), an upstream switch (§9.4), an XA transaction whose restart
replays what followed its prepare (§9.2), records of an aborted Kafka transaction a broker
leaked before their committed copy (§9), DDL barriers on every partition (§9 guarantee 4), and
an incremental snapshot that removes a row the source lost (§9.5 item 5, §9.7), and a keyless
table snapshotted in chunks whose reader restarted mid-table (§9.7). Each vector
carries its release order — listed here in the order §9 step 6 gives, and checked against a
sort by `(ts, source, order key of the first event)`, no merger involved — and the final
tables written out by hand, as a consumer following §9.3, §9.5 and §9.7 ends with them.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rowbus.protocol.codec import Encoding
from rowbus.protocol.conformance import STREAMS
from rowbus.protocol.ddl import DdlKind
from rowbus.protocol.events import (
    BinlogPosition,
    DdlChange,
    Event,
    MarkerMode,
    Op,
    Resolved,
    RowChange,
    SnapshotBegin,
    SnapshotEnd,
    TableSchema,
    TxnRef,
)
from rowbus.protocol.values import Value
from rowbus.testing import events
from tests.unit.consumers.scenario import Scenario
from tests.unit.protocol.streams import vector

T = events.table("db", "t", ("id", "v"), ("id",))
K = events.table("db", "k", ("a", "b"), ())
BASE = 1_700_000_000_000 << 16
TOPIC = "cdc"
Data = RowChange | DdlChange | SnapshotBegin | SnapshotEnd


def at(offset: int, file: str = "bin.000001", upstream: int = 0) -> BinlogPosition:
    return BinlogPosition(file, offset, None, upstream)


@dataclass
class Stream:
    """Lanes `(TOPIC, p, source)`; what each partition holds in read order; the transactions
    in release order."""

    about: str
    sources: Sequence[str]
    partitions: int = 2
    parts: dict[int, list[Event]] = field(default_factory=dict)
    released: list[tuple[str, list[Data]]] = field(default_factory=list)

    def put(self, partition: int, *evs: Event) -> None:
        self.parts.setdefault(partition, []).extend(evs)

    def everywhere(self, ev: Event) -> None:
        for p in range(self.partitions):
            self.put(p, ev)

    def watermark(self, source: str, ts: int) -> None:
        self.everywhere(Resolved(source=source, ts=ts))

    def release(self, source: str, *evs: Data) -> None:
        self.released.append((source, list(evs)))

    def scenario(self) -> Scenario:
        lanes = [(TOPIC, p, s) for s in self.sources for p in range(self.partitions)]
        parts = {(TOPIC, p): list(self.parts.get(p, [])) for p in range(self.partitions)}
        reference = [(s, "", evs[0].ts, list[Event](evs)) for s, evs in self.released]
        return Scenario(lanes, parts, reference)


def _order_key(ev: Data) -> tuple[int, int, int, int]:
    p = ev.position
    return (p.upstream, p.file_number, p.offset, ev.txn.index if ev.txn else 0)


def row(
    ts: int,
    source: str,
    txn: str,
    index: int,
    pos: BinlogPosition,
    *,
    after: tuple[Value, ...] | None = None,
    before: tuple[Value, ...] | None = None,
    count: int | None = None,
    tbl: TableSchema = T,
    op: Op | None = None,
) -> RowChange:
    if op is None:
        op = Op.UPDATE if before and after else Op.DELETE if before else Op.INSERT
    return RowChange(
        source=source,
        ts=ts,
        op=op,
        schema=tbl.schema,
        table=tbl.table,
        schema_id=tbl.schema_id,
        primary_key=tbl.primary_key,
        before=before,
        after=after,
        txn=TxnRef(txn, index, count),
        position=pos,
    )


def ddl(
    ts: int,
    source: str,
    kind: DdlKind,
    statement: str,
    pos: BinlogPosition,
    tbl: TableSchema = T,
    txn: TxnRef | None = None,
) -> DdlChange:
    return DdlChange(
        source=source,
        ts=ts,
        schema=tbl.schema,
        table=tbl.table,
        statement=statement,
        table_schema=tbl,
        position=pos,
        txn=txn,
        kind=kind,
    )


def create(ts: int, source: str, pos: BinlogPosition, tbl: TableSchema = T) -> DdlChange:
    columns = ", ".join(f"{c.name} {c.type}" for c in tbl.columns)
    key = f", PRIMARY KEY ({', '.join(tbl.primary_key)})" if tbl.primary_key else ""
    statement = f"CREATE TABLE {tbl.table} ({columns}{key})"
    return ddl(ts, source, DdlKind.CREATE_TABLE, statement, pos, tbl)


def fragments() -> Stream:
    s = Stream(
        "s1's transaction B (5 rows) in two fragments (§9.1): the first without txn.count and "
        "under a watermark of A's ts, the last with the count; s2's C, whose ts lies between, "
        "is released before B although B's first fragment was read before it",
        ["s1", "s2"],
    )
    c = create(BASE + 1, "s1", at(100))
    s.everywhere(c)
    s.watermark("s1", BASE + 1)
    a = [row(BASE + 2, "s1", "A", i, at(200), after=(i + 1, "a"), count=2) for i in range(2)]
    s.put(1, a[0])
    s.put(0, a[1])
    s.watermark("s1", BASE + 2)
    # the last fragment's events carry the count of the whole transaction
    b = [
        row(
            BASE + 5,
            "s1",
            "B",
            i,
            at(300 + 100 * (i // 3)),
            after=(10 + i, "b"),
            count=5 if i >= 3 else None,
        )
        for i in range(5)
    ]
    s.put(0, b[0], b[2])
    s.put(1, b[1])
    s.watermark("s1", BASE + 2)  # the fragment's Kafka transaction: the last whole one's ts
    c2 = row(BASE + 3, "s2", "C", 0, at(700, "bin.000009"), after=(100, "c"), count=1)
    s.put(1, c2)
    s.watermark("s2", BASE + 3)
    s.put(1, b[3])
    s.put(0, b[4])
    s.watermark("s1", BASE + 5)
    d = row(BASE + 6, "s2", "D", 0, at(800, "bin.000009"), after=(101, "d"), count=1)
    s.put(0, d)
    s.watermark("s2", BASE + 9)
    s.watermark("s1", BASE + 9)
    s.release("s1", c)
    s.release("s1", *a)
    s.release("s2", c2)
    s.release("s1", *b)
    s.release("s2", d)
    return s


def upstream_switch() -> Stream:
    s = Stream(
        "s1 switches to a replica (§9.4): its positions after the switch have upstream 1 and "
        "a smaller file and offset than before, and are no replays; a copy of the last "
        "transaction before the switch (a leaked aborted batch) is one",
        ["s1"],
    )
    c = create(BASE + 1, "s1", at(500, "bin.000007"))
    s.everywhere(c)
    t1 = row(BASE + 2, "s1", "0-1-7", 0, at(900, "bin.000007"), after=(1, "a"), count=1)
    s.put(1, t1)
    s.watermark("s1", BASE + 2)
    s.put(1, t1)  # the replay
    t2 = row(
        BASE + 3,
        "s1",
        "0-1-8",
        0,
        at(300, "bin.000001", 1),
        before=(1, "a"),
        after=(1, "x2"),
        count=1,
    )
    t3 = row(BASE + 4, "s1", "0-1-9", 0, at(420, "bin.000001", 1), after=(3, "c"), count=1)
    s.put(1, t2, t3)
    s.watermark("s1", BASE + 9)
    s.release("s1", c)
    s.release("s1", t1)
    s.release("s1", t2)
    s.release("s1", t3)
    return s


def xa() -> Stream:
    s = Stream(
        "an XA transaction's rows published once, at its XA COMMIT (§9.2); while it was "
        "prepared the reader restarted from before its prepare and published what followed "
        "again (T2, same positions), which is dropped as a replay",
        ["s1"],
    )
    c = create(BASE + 1, "s1", at(400))
    s.everywhere(c)
    t1 = row(BASE + 2, "s1", "0-1-20", 0, at(1000), after=(1, "a"), count=1)
    t2 = [row(BASE + 3, "s1", "0-1-22", i, at(1500), after=(2 + i, "b"), count=2) for i in range(2)]
    s.put(1, t1)
    s.put(0, t2[0])
    s.put(1, t2[1])
    s.watermark("s1", BASE + 3)
    s.put(0, t2[0])  # the restarted reader's copies
    s.put(1, t2[1])
    s.watermark("s1", BASE + 3)
    commit = [
        row(BASE + 4, "s1", "0-1-23", i, at(2000), after=(5 + i, "xa"), count=2) for i in range(2)
    ]
    s.put(1, commit[0])
    s.put(0, commit[1])
    s.watermark("s1", BASE + 9)
    s.release("s1", c)
    s.release("s1", t1)
    s.release("s1", *t2)
    s.release("s1", *commit)
    return s


def aborted() -> Stream:
    s = Stream(
        "a Kafka transaction of s1 aborted after two of T2's three rows were written, which "
        "a broker leaked to read_committed consumers (§9 step 4), then its committed copy: "
        "T2 is released once, whole; s2's transaction is merged in by ts",
        ["s1", "s2"],
    )
    c = create(BASE + 1, "s1", at(100))
    s.everywhere(c)
    t1 = [row(BASE + 2, "s1", "T1", i, at(200), after=(1 + i, "a"), count=2) for i in range(2)]
    s.put(0, t1[0])
    s.put(1, t1[1])
    s.watermark("s1", BASE + 2)
    t2 = [row(BASE + 4, "s1", "T2", i, at(300), after=(3 + i, "b"), count=3) for i in range(3)]
    s.put(0, t2[0])  # leaked, aborted: no watermark with them
    s.put(1, t2[1])
    u = row(BASE + 3, "s2", "U", 0, at(50, "bin.000002"), after=(50, "u"), count=1)
    s.put(0, u)
    s.watermark("s2", BASE + 9)
    s.put(0, t2[0], t2[2])  # the committed copy
    s.put(1, t2[1])
    s.watermark("s1", BASE + 9)
    s.release("s1", c)
    s.release("s1", *t1)
    s.release("s2", u)
    s.release("s1", *t2)
    return s


def ddl_barriers() -> Stream:
    s = Stream(
        "DDLs broadcast to both partitions (§9 guarantee 4), an ALTER with a transaction "
        "reference and a TRUNCATE without one: each released once, after every row before it "
        "and before every row after it, whichever partition's copy is read first; the "
        "TRUNCATE also empties s2's row V of the same table, released before it",
        ["s1", "s2"],
    )
    c = create(BASE + 1, "s1", at(100))
    s.everywhere(c)
    t1 = [row(BASE + 2, "s1", "T1", i, at(200), after=(1 + i, "a"), count=2) for i in range(2)]
    alter = ddl(
        BASE + 4,
        "s1",
        DdlKind.ALTER_TABLE,
        "ALTER TABLE t COMMENT 'x'",
        at(300),
        txn=TxnRef("0-1-3", 0),
    )
    t2 = [row(BASE + 5, "s1", "T2", i, at(400), after=(3 + i, "b"), count=2) for i in range(2)]
    trunc = ddl(BASE + 6, "s1", DdlKind.TRUNCATE_TABLE, "TRUNCATE TABLE t", at(500))
    t3 = row(BASE + 7, "s1", "T3", 0, at(600), after=(9, "c"), count=1)
    s.put(0, t1[0], alter, t2[0], trunc, t3)
    s.put(1, t1[1], alter, t2[1], trunc)
    s.watermark("s1", BASE + 9)
    v = row(BASE + 3, "s2", "V", 0, at(70, "bin.000004"), after=(70, "v"), count=1)
    w = row(BASE + 6, "s2", "W", 0, at(80, "bin.000004"), after=(80, "w"), count=1)
    s.put(1, v, w)
    s.watermark("s2", BASE + 9)
    s.release("s1", c)
    s.release("s1", *t1)
    s.release("s2", v)
    s.release("s1", alter)
    s.release("s1", *t2)
    s.release("s1", trunc)
    s.release("s2", w)
    s.release("s1", t3)
    return s


def keyless_chunks() -> Stream:
    s = Stream(
        "a keyless table snapshotted in chunks (§9.7): the reader was killed after two "
        "chunks and read the table again from its start under a new snapshot id, whose "
        "snapshot_begin empties it again; then streamed changes. The final table is the "
        "second read plus the stream, nothing of the first attempt doubled",
        ["s1"],
    )
    S = at(4000, "bin.000003")
    sid = "snapshot:0/bin.000003:4000:db.k"
    seq = [0]
    ts = [BASE]

    def tick() -> int:
        ts[0] += 1
        return ts[0]

    def nxt() -> int:
        seq[0] += 1
        return seq[0] - 1

    def begin(snapshot: str) -> SnapshotBegin:
        ref = TxnRef(f"{snapshot}:begin", nxt())
        return SnapshotBegin(
            source="s1",
            ts=tick(),
            schema="db",
            table="k",
            snapshot=snapshot,
            mode=MarkerMode.REPLACE,
            position=S,
            txn=ref,
        )

    def creating(snapshot: str) -> DdlChange:
        c = create(tick(), "s1", S, K)
        statement = c.statement.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")
        return DdlChange(
            **{
                **{f: getattr(c, f) for f in DdlChange.__dataclass_fields__},
                "statement": statement,
                "txn": TxnRef(f"{snapshot}:create", nxt()),
            }
        )

    def chunk(name: str, rows: Sequence[tuple[Value, ...]]) -> list[RowChange]:
        when = tick()
        return [row(when, "s1", name, nxt(), S, after=r, tbl=K, op=Op.READ) for r in rows]

    release: list[list[Data]] = []
    b1 = begin(sid)
    c1 = creating(sid)
    first = [
        chunk(f"{sid}:0:{n}", rows)
        for n, rows in enumerate(
            [[("1", "x"), ("1", "x"), ("2", None)], [("3", "y"), ("4", "y"), ("4", "y")]]
        )
    ]
    for ev in (b1, c1):
        s.everywhere(ev)
        s.watermark("s1", ev.ts)
    for ch in first:
        s.put(1, *ch)
        s.watermark("s1", ch[0].ts)
    release += [[b1], [c1], *first]
    again = f"{sid}:again1"
    b2 = begin(again)
    c2 = creating(again)
    second = [
        chunk(f"{again}:1:{n}", rows)
        for n, rows in enumerate(
            [
                [("1", "x"), ("2", None), ("3", "y")],
                [("4", "y"), ("4", "y"), ("5", "new")],
                [("6", None)],
            ]
        )
    ]
    for ev in (b2, c2):
        s.everywhere(ev)
        s.watermark("s1", ev.ts)
    for ch in second:
        s.put(1, *ch)
        s.watermark("s1", ch[0].ts)
    end = SnapshotEnd(
        source="s1",
        ts=tick(),
        schema="db",
        table="k",
        snapshot=again,
        mode=MarkerMode.REPLACE,
        position=S,
        txn=TxnRef(f"{again}:end", nxt()),
        rows=7,
    )
    s.everywhere(end)
    ins = row(tick(), "s1", "0-1-40", 0, at(5000, "bin.000003"), after=("9", "z"), tbl=K, count=2)
    dele = row(ins.ts, "s1", "0-1-40", 1, at(5000, "bin.000003"), before=("4", "y"), tbl=K, count=2)
    s.put(1, ins, dele)
    s.watermark("s1", BASE + 99)
    release += [[b2], [c2], *second, [end], [ins, dele]]
    for txn in release:
        s.release("s1", *txn)
    return s


def incremental_refresh() -> Stream:
    s = Stream(
        "an incremental snapshot (mode refresh, §9.5 item 5, §9.7) of a table the consumer "
        "holds, in two chunks at H + 1 of their views with a streamed insert between them: "
        "row 3, gone at the source without a trace in the binlog, is neither read nor "
        "streamed since the begin, so the end deletes it; row 4, streamed, stays",
        ["s1"],
    )
    c = create(BASE + 1, "s1", at(100))
    s.everywhere(c)
    t1 = [row(BASE + 2, "s1", "0-1-2", i, at(200), after=(1 + i, "a"), count=3) for i in range(3)]
    s.put(0, t1[0], t1[2])
    s.put(1, t1[1])
    t2 = row(BASE + 3, "s1", "0-1-3", 0, at(250), before=(2, "a"), after=(2, "b2"), count=1)
    s.put(1, t2)
    s.watermark("s1", BASE + 3)
    sid = "snapshot:incremental:db.t:0/bin.000001:301"
    first = at(301)
    begin = SnapshotBegin(
        source="s1",
        ts=BASE + 4,
        schema="db",
        table="t",
        snapshot=sid,
        mode=MarkerMode.REFRESH,
        position=first,
        txn=TxnRef(f"{sid}:begin", 0),
    )
    s.everywhere(begin)
    chunk1 = row(BASE + 5, "s1", f"{sid}:0", 1, first, after=(1, "a"), op=Op.READ)
    s.put(0, chunk1)
    s.watermark("s1", BASE + 5)
    t3 = row(BASE + 6, "s1", "0-1-4", 0, at(400), after=(4, "d"), count=1)
    s.put(1, t3)
    s.watermark("s1", BASE + 6)
    second = at(451)
    chunk2 = row(BASE + 7, "s1", f"{sid}:1", 2, second, after=(2, "b2"), op=Op.READ)
    s.put(1, chunk2)
    end = SnapshotEnd(
        source="s1",
        ts=BASE + 8,
        schema="db",
        table="t",
        snapshot=sid,
        mode=MarkerMode.REFRESH,
        position=second,
        txn=TxnRef(f"{sid}:end", 3),
        rows=2,
    )
    s.everywhere(end)
    s.watermark("s1", BASE + 9)
    for txn in ([c], t1, [t2], [begin], [chunk1], [t3], [chunk2], [end]):
        s.release("s1", *txn)
    return s


@dataclass(frozen=True)
class Named:
    name: str
    build: Callable[[], Stream]
    tables: dict[str, list[list[Any]]]


NAMED = (
    Named(
        "named_fragments",
        fragments,
        {
            "db.t": [
                [1, "a"],
                [2, "a"],
                [10, "b"],
                [11, "b"],
                [12, "b"],
                [13, "b"],
                [14, "b"],
                [100, "c"],
                [101, "d"],
            ]
        },
    ),
    Named("named_upstream_switch", upstream_switch, {"db.t": [[1, "x2"], [3, "c"]]}),
    Named("named_xa", xa, {"db.t": [[1, "a"], [2, "b"], [3, "b"], [5, "xa"], [6, "xa"]]}),
    Named(
        "named_aborted_duplicates",
        aborted,
        {"db.t": [[1, "a"], [2, "a"], [3, "b"], [4, "b"], [5, "b"], [50, "u"]]},
    ),
    Named("named_ddl_barriers", ddl_barriers, {"db.t": [[9, "c"], [80, "w"]]}),
    Named(
        "named_incremental_refresh",
        incremental_refresh,
        {"db.t": [[1, "a"], [2, "b2"], [4, "d"]]},
    ),
    Named(
        "named_keyless_chunks",
        keyless_chunks,
        {
            "db.k": [
                ["1", "x"],
                ["2", None],
                ["3", "y"],
                ["4", "y"],
                ["5", "new"],
                ["6", None],
                ["9", "z"],
            ]
        },
    ),
)


def _sorted_rows(rows: list[list[Any]]) -> list[list[Any]]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def build(named: Named, encoding: Encoding) -> dict[str, Any]:
    stream = named.build()
    order = sorted(stream.released, key=lambda r: (r[1][0].ts, r[0], _order_key(r[1][0])))
    assert order == stream.released, f"{named.name}: not listed in §9's release order"
    data = vector(stream.scenario(), encoding, random.Random(named.name))
    data["about"] = stream.about
    data["tables"] = {t: _sorted_rows(rows) for t, rows in sorted(named.tables.items())}
    return {"about": data.pop("about"), **data}


def main() -> int:
    encodings = (Encoding.PROTOBUF, Encoding.AVRO, Encoding.JSON)
    for old in STREAMS.glob("named_*.json"):
        old.unlink()
    for i, named in enumerate(NAMED):
        data = build(named, encodings[i % len(encodings)])
        path = STREAMS / f"{named.name}.json"
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {len(NAMED)} named stream vectors to {STREAMS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
