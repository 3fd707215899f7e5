"""Throughput mode's release from lane summaries equals the merger's (`planner.plan`) on the
same records: the rows released, and the state stored — and a batch after a hold, read again
from `reread`, releases what the merger released from its stash."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.merge.positions import event_key
from rowbus.protocol.events import Op, Resolved, RowChange
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.ownership import owner
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.release import (
    Bound,
    LanePiece,
    Released,
    Tail,
    advance,
    bound,
    key_of,
    okey,
    released_by_tails,
)
from rowbus.spark_apply.throughput import BUCKETS
from tests.unit.spark_apply.events import resolved, row

T = "topic"
LANES = [(T, 0, "s1"), (T, 1, "s1")]


def stream(txns: int) -> list[Envelope]:
    """Single-row transactions alternating partitions, each followed by a Resolved at its ts
    on both partitions (as a reader publishes)."""
    out: list[Envelope] = []
    offsets = {0: 0, 1: 0}

    def put(p: int, ev: object) -> None:
        out.append(Envelope(T, p, offsets[p], ev))  # type: ignore[arg-type]
        offsets[p] += 1

    for n in range(txns):
        put(n % 2, row(10 + n, Op.INSERT, after=(n, "v"), txn=f"t{n}", index=0))
        for p in (0, 1):
            put(p, resolved(10 + n))
    return out


def summarize(batch: list[Envelope], previous: PlannerState) -> list[LanePiece]:
    """What the executors report (`throughput.read_and_key`), for batches without duplicates."""
    pieces: dict[tuple[str, int, str], dict[str, object]] = {}
    for e in sorted(batch, key=lambda e: (e.partition, e.offset)):
        lane = (e.topic, e.partition, e.event.source)
        p = pieces.setdefault(lane, {"watermark": 0, "raised_at": 0, "rows": 0})
        if isinstance(e.event, Resolved):
            if e.event.ts > p["watermark"]:  # type: ignore[operator]
                p["watermark"], p["raised_at"] = e.event.ts, e.offset
            continue
        assert isinstance(e.event, RowChange)
        key = event_key(e.event)
        last = previous.last_seen.get(lane)
        if last is not None and key <= last:
            continue
        if p["rows"] == 0:
            p["first_offset"], p["first_key"], p["first_ts"] = e.offset, key, e.event.ts
        p["rows"] = int(p["rows"]) + 1  # type: ignore[call-overload]
        p["last_key"], p["last_ts"] = key, e.event.ts
    return [LanePiece(*lane, **fields) for lane, fields in pieces.items()]  # type: ignore[arg-type]


def released_of(
    batch: list[Envelope], b: Bound, previous: PlannerState
) -> tuple[Released, list[int]]:
    last: dict[tuple[str, int, str], tuple[object, int]] = {}
    held: dict[tuple[str, int], int] = {}
    ends: dict[tuple[str, int], int] = {}
    keys = []
    for e in sorted(batch, key=lambda e: (e.partition, e.offset)):
        tp = (e.topic, e.partition)
        ends[tp] = max(ends.get(tp, 0), e.offset + 1)
        if not isinstance(e.event, RowChange):
            continue
        lane = (e.topic, e.partition, e.event.source)
        key = event_key(e.event)
        if (seen := previous.last_seen.get(lane)) is not None and key <= seen:
            continue
        if e.event.ts <= b.mark:
            last[lane] = (key, e.event.ts)
            keys.append(e.event.after[0])  # type: ignore[index]
        else:
            held[tp] = min(held.get(tp, e.offset), e.offset)
    return Released(last, held, ends), keys  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(5, 20))
def test_batches_release_what_the_merger_releases(cuts: list[int], txns: int) -> None:
    """Every split of a stream into batches: each batch, read with its `reread` records,
    releases the rows the merger releases, and the stored state matches the merger's."""
    records = stream(txns)
    by_offset = {(e.partition, e.offset): e for e in records}
    ends = {0: 0, 1: 0}
    merged, mine = PlannerState(), PlannerState()
    for cut in [*cuts, 10**6]:
        new = {p: min(ends[p] + cut, sum(1 for e in records if e.partition == p)) for p in ends}
        fresh = [e for e in records if ends[e.partition] <= e.offset < new[e.partition]]
        again = [
            by_offset[(p, o)]
            for (_t, p), start in mine.reread.items()
            for o in range(start, ends[p])
        ]
        ends = new
        p = plan(merged, fresh, LANES)
        b = bound(mine, summarize(again + fresh, mine), LANES)
        assert isinstance(b, Bound)
        released, keys = released_of(again + fresh, b, mine)
        assert sorted(keys) == sorted(e.event.after[0] for e in p.steps[-1].rows)  # type: ignore[union-attr]
        mine, merged = advance(mine, b, released), p.state
        assert mine.watermarks == merged.watermarks
        assert mine.offsets == merged.offsets
        assert mine.released_through == merged.released_through
        assert mine.ts == merged.ts
        assert {s: f.position for s, f in mine.floors.items()} == {
            s: f.position for s, f in merged.floors.items()
        }
    assert not merged.stash and not mine.reread


def test_a_stash_or_a_new_source_sends_the_batch_to_the_merger() -> None:
    stashed = plan(PlannerState(), stream(3)[:1], LANES).state
    assert bound(stashed, [], LANES) == "events held in the sink's stash"
    assert "new on" in str(bound(PlannerState(), [LanePiece(T, 0, "s2")], LANES))


def test_pieces_of_one_lane_that_overlap_are_refused() -> None:
    k1, k2 = (0, 1, "f", 10, 0), (0, 1, "f", 20, 0)
    a = LanePiece(
        T, 0, "s1", rows=2, first_offset=0, first_key=k1, last_key=k2, first_ts=1, last_ts=2
    )
    b = LanePiece(
        T, 0, "s1", rows=1, first_offset=5, first_key=k2, last_key=k2, first_ts=2, last_ts=2
    )
    assert "repeated" in str(bound(PlannerState(), [a, b], LANES))


def test_order_keys_as_text_sort_and_round_trip() -> None:
    keys = [
        (0, -12, "b", 1, 0),
        (0, -1, "a", 5, 0),
        (0, -1, "a", 40, 0),
        (0, 0, "z", 0, 0),
        (0, 3, "b.000003", 9, 1),
        (0, 3, "b.000003", 10, 0),
        (0, 4, "b.000004", 1, 0),
        (1, 1, "c.000001", 4, 0),
        (1, 1, "c.000001", 12345678901234567890, 2**31),
        (1, 10, "c.000010", 0, 0),
        (2**63, 0, "", 0, 0),
    ]
    assert sorted(keys, key=okey) == keys
    assert [key_of(okey(k)) for k in keys] == keys
    assert len(okey((0, 1, "bin.000001", 8054, 22))) < 30  # it crosses the JVM with every row


def test_keys_one_to_the_sink_have_one_owner() -> None:
    """The owner hashes the key's skeleton under the sink's folds (`keys.sink_key`): keys
    one to the sink's collation share an owner, including those a plain case/accent fold
    misses (ß = s under general_ci, Swedish Ä = Æ and Y = Ü)."""
    text = (Fold.TEXT,)
    assert owner("d.t", ("'c'",), text) == owner("d.t", ("'C  '",), text)
    assert owner("d.t", ("'Ça '",), text) == owner("d.t", ("'ca'",), text)
    assert owner("d.t", ("'straße'",), text) == owner("d.t", ("'strase'",), text)
    assert owner("d.t", ("'Ä'",), text) == owner("d.t", ("'Æ'",), text)
    assert owner("d.t", ("'Y'",), text) == owner("d.t", ("'Ü'",), text)
    assert owner("d.t", ("'c'",), text) != owner("d.u", ("'c'",), text)
    # A PAD SPACE binary column: trailing spaces only; an exact one: byte for byte.
    assert owner("d.t", ("'a  '",), (Fold.PAD,)) == owner("d.t", ("'a'",), (Fold.PAD,))
    exact = (Fold.EXACT, Fold.EXACT)
    assert owner("d.t", ("12", "'a '"), exact) != owner("d.t", ("12", "'a'"), exact)
    assert owner("d.t", ()) == owner("d.t", (), text)


def test_owner_on_the_executors_uses_the_shipped_folds_and_refuses_an_unknown_target() -> None:
    """`throughput._owned`: the owner of a row is by its key's skeleton under the folds the
    driver shipped for its target (a key column of a ``_bin`` sink compares 'a' and 'A'
    apart, of a ``_ci`` one together); a target without folds (no table in the sink yet)
    sends the batch to the driver's path."""
    import pytest

    from rowbus.routing.routes import Router, RouteSettings, Target
    from rowbus.spark_apply.throughput import KeyContext, _NotInSinkError, _owned
    from tests.unit.spark_apply.events import table

    tbl = table(columns=("k", "v"), key=("k",))
    routes = (RouteSettings(match="db.*", target="sink.{table}"),)

    def owners(folds: dict[Target, dict[str, Fold]], *keys: str) -> set[int]:
        ctx = KeyContext({tbl.schema_id: tbl}, routes, "identity", {}, {}, folds)
        router = Router(routes, "identity")
        found = set()
        for k in keys:
            ev = row(1, after=(k, "'x'"), tbl=tbl)
            ((target, k_owner, _t_owner, _part),) = _owned(ev, ("t", 0, 1), ctx, router, {})
            assert target == "sink.t"
            found.add(k_owner)
        return found

    t = Target("sink", "t")
    assert len(owners({t: {"k": Fold.TEXT}}, "'a'", "'A'", "'a '")) == 1
    assert len(owners({t: {"k": Fold.TEXT}}, "'s'", "'ß'", "'SS'")) == 1
    assert len(owners({t: {"k": Fold.PAD}}, "'a'", "'a '")) == 1
    assert len(owners({t: {"k": Fold.PAD}}, "'a'", "'A'")) == 2
    with pytest.raises(_NotInSinkError):
        owners({Target("sink", "other"): {"k": Fold.TEXT}}, "'a'")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=30), min_size=1, max_size=3),
    st.integers(1, 4),
    st.integers(0, 60),
    st.data(),
)
def test_tails_release_what_the_rows_release(
    steps: list[list[int]], limit: int, mark: int, data: st.DataObject
) -> None:
    """Per lane rows in ts order, cut into read tasks' pieces at random offsets: the tails
    (of at most `limit` runs) give what the JVM's aggregate over the rows gives, or None only
    when the mark falls before a tail."""
    rows: list[tuple[tuple[str, int, str], int, int, str]] = []  # lane, offset, ts, key
    tails: list[Tail] = []
    for p, gaps in enumerate(steps):
        lane, ts = (T, p, "s1"), 0
        cuts = set(data.draw(st.lists(st.integers(1, len(gaps)), max_size=3)))
        tail = Tail(*lane, limit=limit)
        for offset, gap in enumerate(gaps):
            if offset in cuts:
                tails.append(tail)
                tail = Tail(*lane, limit=limit)
            ts += gap
            key = okey((0, 1, "f", 100 + offset, 0))
            tail.add(ts, offset, key)
            rows.append((lane, offset, ts, key))
        tails.append(tail)
    ends = {(T, p): len(g) for p, g in enumerate(steps)}
    got = released_by_tails(tails, mark, ends)
    last: dict[tuple[str, int, str], tuple[object, int]] = {}
    held: dict[tuple[str, int], int] = {}
    for lane, offset, ts, key in rows:
        if ts <= mark:
            last[lane] = (key_of(key), ts)
        else:
            held[lane[:2]] = min(held.get(lane[:2], offset), offset)  # type: ignore[index]
    if got is None:
        assert any(t.before is not None and t.before[1] > mark for t in tails)
    else:
        assert got == Released(last, held, ends)  # type: ignore[arg-type]
    assert released_by_tails(tails, 10**6, ends) is not None  # everything released


def test_a_write_task_s_compact_row_gives_the_event_s_op_and_images() -> None:
    """What the keying task ships a write task (`_compact`: op, schema id, images; no header)
    gives back each event's op, table and literal images, a key-moving update cut in its two
    halves, and sorts by (ts, source, order key, part); bundled by owner bucket, a row past
    the release mark stays out."""
    from rowbus.spark_apply.rendered import rendered_row, row_event
    from rowbus.spark_apply.throughput import (
        NEW_KEY,
        OLD_KEY,
        WHOLE,
        WRITE_COLUMNS,
        _Bundler,
        _compact,
        _envelope,
        _rows,
        released,
        unbundled,
    )
    from tests.unit.spark_apply.events import table

    tbl = table(columns=("k", "v"), key=("k",))
    cases = [
        (row(1, after=(1, "a\x1fb"), tbl=tbl), WHOLE, Op.INSERT),
        (row(2, Op.UPDATE, before=(1, "x"), after=(1, None), tbl=tbl), WHOLE, Op.UPDATE),
        (row(3, Op.DELETE, before=(1, ""), tbl=tbl), WHOLE, Op.DELETE),
        (row(4, Op.UPDATE, before=(1, "x"), after=(2, "y"), tbl=tbl), OLD_KEY, Op.DELETE),
        (row(4, Op.UPDATE, before=(1, "x"), after=(2, "y"), tbl=tbl), NEW_KEY, Op.INSERT),
    ]
    texts = [rendered_row(ev) for ev, _part, _op in cases]
    assert all(texts)
    cols: dict[str, list[object]] = {n: [] for n in (*WRITE_COLUMNS, "bucket")}
    for i, ((ev, part, _op), text) in enumerate(zip(cases, texts, strict=True)):
        assert text is not None
        for name, value in (
            ("topic", "t"), ("partition", 0), ("offset", i), ("source", ev.source),
            ("ts", ev.ts), ("okey", okey(event_key(ev))), ("part", part),
            ("row", _compact(text)), ("bucket", 3 - i % 2),
        ):  # fmt: skip
            cols[name].append(value)
    # A row past the mark stays held (the mark is the cases' last ts).
    late = {n: [v[-1]] for n, v in cols.items()}
    late["ts"] = [cases[-1][0].ts + 1]
    bundler = _Bundler()
    assert bundler.add(cols) == len(cases)
    assert bundler.add(late) == len(cases) + 1
    bundles = bundler.flush()
    assert [bucket for bucket, _blob in bundles] == [2, 3]  # one bundle per owner bucket
    assert bundler.rows == 0
    # The write task's rows come out as they went in, only those at or below the mark.
    mark = cases[-1][0].ts
    assert [b.num_rows for b in unbundled(bundles)] == [2, 4]
    got = sorted(_rows(released(unbundled(bundles), mark)), key=lambda r: r[:4])
    for got_row, (ev, part, op), text in zip(got, cases, texts, strict=True):
        assert text is not None
        full = row_event(text, ev.source, ev.ts, {})
        order = got_row[:4]
        out = _envelope(got_row, {tbl.schema_id: tbl}).event
        assert isinstance(out, RowChange)
        assert order == (ev.ts, ev.source, okey(event_key(ev)), part)
        assert (out.op, out.schema, out.table, out.schema_id) == (
            op,
            tbl.schema,
            tbl.table,
            tbl.schema_id,
        )
        assert out.before == (full.before if op is not Op.INSERT else None)
        assert out.after == (full.after if op is not Op.DELETE else None)
        assert len(_compact(text)) < len(text)


@given(
    st.lists(
        st.tuples(st.sampled_from(LANES), st.integers(1, 9), st.integers(-1, BUCKETS - 1)),
        max_size=40,
    ),
    st.integers(0, 10),
)
@settings(max_examples=50, deadline=None)
def test_the_release_aggregate_over_bundles_equals_one_over_the_rows(
    rows: list[tuple[tuple[str, int, str], int, int]], mark: int
) -> None:
    """`throughput.released_by_lane` (a mark before a piece's tail; it reads the owner
    bundles of every bucket, -1 too) gives per lane the last order key and highest ts at or
    below the mark and the first offset above it, as the same aggregate over the rows."""
    from rowbus.spark_apply.throughput import WRITE_COLUMNS, _Bundler, released_by_lane

    cols: dict[str, list[object]] = {n: [] for n in (*WRITE_COLUMNS, "bucket")}
    want: dict[tuple[str, int, str], tuple[str | None, int | None, int | None]] = {}
    for offset, (lane, ts, bucket) in enumerate(rows):
        k = okey((0, ts, "f", offset, 0))
        for name, value in zip(
            (*WRITE_COLUMNS, "bucket"),
            (*lane[:2], offset, lane[2], ts, k, 0, "", bucket),
            strict=True,
        ):
            cols[name].append(value)
        last, top, held = want.get(lane, (None, None, None))
        if ts <= mark:
            want[lane] = (max(k, last or k), max(ts, top or ts), held)
        else:
            want[lane] = (last, top, offset if held is None else held)
    bundler = _Bundler()
    bundler.add(cols)
    got = {r[:3]: r[3:] for r in released_by_lane(mark)(iter(bundler.flush()))}
    assert got == want
