"""The throughput mode's rows without an event each: the write tasks' collapse of literal
images (`changes.collapse_images`) against the one collapse over the same rows' events
(`changes.collapse`), and the keying tasks' header reading against the event's keys."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol.events import Op, RowChange, TableSchema
from rowbus.routing.routes import Router
from rowbus.spark_apply import throughput
from rowbus.spark_apply.changes import ImageRow, TableChanges, collapse, collapse_images
from rowbus.spark_apply.exceptions import BadEventError
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.literals import as_literals
from rowbus.spark_apply.planner import Envelope
from rowbus.spark_apply.rendered import rendered_row
from rowbus.spark_apply.shard_writes import SHIPPED
from tests.unit.spark_apply.events import row, table

ONE = table(name="one", columns=("k", "v"), key=("k",))
TWO = table(name="two", columns=("a", "b", "v"), key=("a", "b"))
SCHEMAS = {t.schema_id: t for t in (ONE, TWO)}
KEYS = ["c", "C", "c ", "d", "D", "e"]
"""Keys the sink's `_ci` collation calls equal in pairs: collapse clears them first."""


def _script(draw: Any) -> list[RowChange]:
    """Inserts, updates (some moving the key) and deletes of the rows present, on two tables."""
    present: dict[tuple[str, Any], tuple[Any, ...]] = {}
    events: list[RowChange] = []
    for ts in range(1, draw(st.integers(1, 40)) + 1):
        tbl = draw(st.sampled_from([ONE, TWO]))
        key = (
            (draw(st.sampled_from(KEYS)),)
            if tbl is ONE
            else (draw(st.integers(1, 3)), draw(st.sampled_from(KEYS)))
        )
        value = draw(st.one_of(st.none(), st.text("xy'\\", max_size=3)))
        old = present.get((tbl.table, key))
        if old is None:
            after = (*key, value)
            present[(tbl.table, key)] = after
            events.append(row(ts, Op.INSERT, None, after, tbl=tbl))
        elif draw(st.booleans()):
            del present[(tbl.table, key)]
            events.append(row(ts, Op.DELETE, old, None, tbl=tbl))
        else:
            moved = (*key[:-1], draw(st.sampled_from(KEYS)))
            if (tbl.table, moved) in present and moved != key:
                moved = key
            after = (*moved, value)
            del present[(tbl.table, key)]
            present[(tbl.table, moved)] = after
            events.append(row(ts, Op.UPDATE, old, after, tbl=tbl))
    return events


def _image_row(ev: RowChange) -> ImageRow:
    before = None if ev.before is None else list(as_literals(ev.before))
    after = None if ev.after is None else list(as_literals(ev.after))
    return ev.op, ev.schema_id, before, after


def _state(tables: dict[Any, TableChanges]) -> dict[Any, Any]:
    """What the sink is written from: keys, their images and the keys cleared first."""
    return {
        target: (
            {k: (c, v) for k, (c, v, _e) in tc.upserts.items()},
            {k: c for k, (c, _e) in tc.deletes.items()},
            set(tc.clear),
        )
        for target, tc in tables.items()
    }


FOLDS = {"k": Fold.TEXT, "b": Fold.TEXT}


@settings(max_examples=150)
@given(st.data(), st.sampled_from([{}, FOLDS]))
def test_images_collapse_as_the_events_do(data: Any, folds: dict[str, Fold]) -> None:
    events = _script(data.draw)
    envs = [Envelope("t", 0, i, ev) for i, ev in enumerate(events)]
    expected = collapse(envs, Router([]), SCHEMAS.get, folds=lambda _t: folds).get(0, {})
    got = collapse_images(
        [_image_row(ev) for ev in events],
        envs.__getitem__,
        SHIPPED,
        Router([]),
        SCHEMAS.get,
        folds=lambda _t: folds,
    )
    assert got is not None
    assert _state(got) == _state(expected)
    if folds:  # 'c' and 'C' both touched: one row to the sink, cleared first
        assert any(tc.clear for tc in expected.values()) == any(tc.clear for tc in got.values())


def test_a_table_that_needs_its_events_is_left_to_collapse() -> None:
    keyless = TableSchema("db", "keyless", ONE.columns, ())
    rows = [_image_row(row(1, Op.INSERT, None, ("c", "1"), tbl=ONE))]
    envs = [Envelope("t", 0, 0, row(1, Op.INSERT, None, ("c", "1"), tbl=ONE))]
    assert (
        collapse_images(
            rows, envs.__getitem__, SHIPPED, Router([]), SCHEMAS.get, lambda _t: [("v",)]
        )
        is None
    )
    rows = [(Op.INSERT, keyless.schema_id, None, ["'c'", "'1'"])]
    envs = [Envelope("t", 0, 0, row(1, Op.INSERT, None, ("c", "1"), tbl=keyless))]
    schemas = {keyless.schema_id: keyless}
    assert collapse_images(rows, envs.__getitem__, SHIPPED, Router([]), schemas.get) is None


def test_an_image_of_the_wrong_width_is_refused_naming_its_row() -> None:
    good = row(1, Op.INSERT, None, ("c", "1"), tbl=ONE)
    rows = [_image_row(good), (Op.INSERT, ONE.schema_id, None, ["'d'"])]
    envs = [Envelope("t", 0, 7, good), Envelope("t", 0, 8, good)]
    with pytest.raises(BadEventError, match=r"t\[0\]@8"):
        collapse_images(rows, envs.__getitem__, SHIPPED, Router([]), SCHEMAS.get)


def test_a_write_task_collapses_its_compact_rows_and_key_moving_halves() -> None:
    """`throughput._collapsed` over `_compact` texts, an update moving its key cut in the old
    key's delete and the new key's upsert (two tasks' halves here in one), equals collapse."""
    events = [
        row(1, Op.INSERT, None, ("c", "1"), tbl=ONE),
        row(2, Op.UPDATE, ("c", "1"), ("d", "2"), tbl=ONE),
        row(3, Op.INSERT, None, (1, "e", None), tbl=TWO),
        row(4, Op.DELETE, (1, "e", None), None, tbl=TWO),
    ]
    rows: list[throughput.Row] = []
    for i, ev in enumerate(events):
        text = rendered_row(ev)
        assert text is not None
        halves = [throughput.OLD_KEY, throughput.NEW_KEY] if i == 1 else [throughput.WHOLE]
        rows += [
            (ev.ts, ev.source, str(i), p, throughput._compact(text), "t", 0, i) for p in halves
        ]
    ctx = throughput.WriteContext(
        None,  # type: ignore[arg-type] - no sink: collapse only
        "",
        "job",
        1,
        "{}",
        0,
        10,
        SCHEMAS,
        (),
        "identity",
        {},
        {},
        1 << 20,
        {},
    )
    got = throughput._collapsed(rows, Router([]), ctx)
    envs = [Envelope("t", 0, i, ev) for i, ev in enumerate(events)]
    assert _state(got) == _state(collapse(envs, Router([]), SCHEMAS.get)[0])


def test_keying_from_the_header_equals_keying_by_the_event() -> None:
    """`_Keyer.key` reads a row's header without building its event: order keys, owners,
    halves of a key-moving update, duplicates dropped by the lane's last key and rows under a
    source's floor equal what the event gives (`row_event`, `event_key`, `okey`, `_owned`)."""
    from rowbus.merge.positions import Floor, event_key
    from rowbus.routing.routes import Target
    from rowbus.spark_apply.release import okey
    from rowbus.spark_apply.rendered import row_event

    events = [
        row(1, Op.INSERT, None, ("c", "1"), tbl=ONE),
        row(2, Op.UPDATE, ("c", "1"), ("C", "2"), tbl=ONE),  # moves its key
        row(3, Op.UPDATE, ("C", "2"), ("C", None), tbl=ONE),
        row(4, Op.INSERT, None, (1, "d", "x"), tbl=TWO),
        row(5, Op.DELETE, (1, "d", "x"), None, tbl=TWO),
        row(6, Op.INSERT, None, ("e", "1"), tbl=ONE, source="s2"),  # under s2's floor
    ]
    texts = [rendered_row(ev) for ev in events]
    records = {
        "topic": ["t"] * (len(events) + 1),
        "partition": [0] * (len(events) + 1),
        "offset": list(range(len(events) + 1)),
        "kind": ["row"] * len(events) + ["row"],
        "source": [ev.source for ev in events] + ["s1"],
        "ts": [ev.ts for ev in events] + [1],
        "value": [b"v" * 10] * (len(events) + 1),
        "row": [*texts, texts[0]],  # the first row again: a duplicate
    }
    folds = {"k": Fold.TEXT, "b": Fold.TEXT}
    ctx = throughput.KeyContext(
        SCHEMAS,
        (),
        "identity",
        {},
        {"s2": Floor(ts=6)},
        {Target("db", "one"): folds, Target("db", "two"): folds},
    )
    keyer = throughput._Keyer(ctx)
    out = keyer.key(records, 0)
    expected: list[tuple[Any, ...]] = []
    for i, (ev, text) in enumerate(zip(events[:5], texts, strict=False)):
        assert text is not None
        full = row_event(text, ev.source, ev.ts, {})
        key = okey(event_key(full))
        for target, k_owner, _t_owner, part in throughput._owned(
            full, ("t", 0, i), ctx, Router([]), {}
        ):
            bucket = throughput.bucket_of(k_owner)
            expected.append((i, key, part, throughput._compact(text), bucket, target != ""))
    got = list(zip(out["offset"], out["okey"], out["part"], out["row"], out["bucket"], strict=True))
    assert [(*g, True) for g in got] == expected
    assert out["part"] == [0, 1, 2, 0, 0, 0]
    assert keyer.pieces[("t", 0, "s1")].rows == 5
    # Every record read counts, those the push rules drop too (`bytes_in_total`).
    summary = throughput.Summary.of([keyer.summary()])
    assert (summary.records, summary.bytes) == (len(events) + 1, 10 * (len(events) + 1))


def test_stage_one_summaries_are_one_per_task_and_none_may_be_missing() -> None:
    """A task run twice (its stage run again) hands in its summary twice, the same both
    times: one counts. A task that handed in none stops the batch rather than bound it
    without that task's lanes."""
    from rowbus.spark_apply.exceptions import ApplyError

    param = throughput.Summaries()
    got = param.addInPlace(param.zero([]), [(1, "b"), (0, "a")])
    got = param.addInPlace(got, [(1, "b")])
    assert throughput.Summaries.by_task(got, 2) == ["a", "b"]
    with pytest.raises(ApplyError, match=r"tasks \[2\] of 3 reported no summary"):
        throughput.Summaries.by_task(got, 3)


def test_a_batch_s_summaries_leave_pyspark_s_registry_of_accumulators() -> None:
    """The driver's registry keeps every accumulator made for the process's life: one a batch
    would grow without bound in a long-running job."""
    from pyspark.accumulators import Accumulator, _accumulatorRegistry

    summaries = Accumulator(987_654_321, [], throughput.Summaries())
    assert _accumulatorRegistry.get(summaries.aid) is summaries
    throughput.Summaries.forget(summaries)
    assert summaries.aid not in _accumulatorRegistry
