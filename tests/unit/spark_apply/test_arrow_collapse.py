"""A write task's collapse over Arrow (`arrow_collapse`) against the one collapse of the same
rows one by one (`throughput._collapsed`): the same deletes and upserts per target, or None
where the one collapse has more to do."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.protocol.events import Op, RowChange, TableSchema
from rowbus.routing.routes import Router, RouteSettings, Target
from rowbus.spark_apply import throughput
from rowbus.spark_apply.arrow_collapse import Bulk, collapsed, write_bulks
from rowbus.spark_apply.changes import TableChanges
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.literals import SEP, row_of_literals
from rowbus.spark_apply.rendered import rendered_row
from tests.unit.spark_apply.events import row, table

ONE = table(name="one", columns=("k", "v"), key=("k",))
TWO = table(name="two", columns=("a", "b", "v"), key=("a", "b"))
SCHEMAS = {t.schema_id: t for t in (ONE, TWO)}
EXACT = {"k": Fold.EXACT, "a": Fold.EXACT, "b": Fold.EXACT}
TEXT_B = {"k": Fold.EXACT, "a": Fold.EXACT, "b": Fold.TEXT}


def _script(draw: Any) -> list[RowChange]:
    """Inserts, updates (some moving the key), deletes of present rows and re-inserts of
    deleted keys, on two tables (ONE keyed by a number, TWO by a number and a text)."""
    present: dict[tuple[str, Any], tuple[Any, ...]] = {}
    events: list[RowChange] = []
    for ts in range(1, draw(st.integers(1, 40)) + 1):
        tbl = draw(st.sampled_from([ONE, TWO]))
        key = (
            (draw(st.integers(1, 6)),)
            if tbl is ONE
            else (draw(st.integers(1, 2)), draw(st.sampled_from(["c", "C", "d"])))
        )
        value = draw(st.one_of(st.none(), st.text("xy'\\,()", max_size=3)))
        old = present.get((tbl.table, key))
        if old is None:
            present[(tbl.table, key)] = after = (*key, value)
            events.append(row(ts, Op.INSERT, None, after, tbl=tbl))
        elif draw(st.booleans()):
            del present[(tbl.table, key)]
            events.append(row(ts, Op.DELETE, old, None, tbl=tbl))
        else:
            moved = (draw(st.integers(1, 6)),) if tbl is ONE else key
            if (tbl.table, moved) in present and moved != key:
                moved = key
            after = (*moved, value)
            del present[(tbl.table, key)]
            present[(tbl.table, moved)] = after
            events.append(row(ts, Op.UPDATE, old, after, tbl=tbl))
    return events


def _rows(events: list[RowChange]) -> list[throughput.Row]:
    """The write task's rows of `events` as the keying tasks send them: a key-moving update
    as its old key's delete and its new key's upsert."""
    rows: list[throughput.Row] = []
    for i, ev in enumerate(events):
        text = rendered_row(ev)
        assert text is not None
        moves = (
            ev.op is Op.UPDATE
            and ev.before is not None
            and ev.after is not None
            and ev.before[: len(ev.primary_key)] != ev.after[: len(ev.primary_key)]
        )
        halves = [throughput.OLD_KEY, throughput.NEW_KEY] if moves else [throughput.WHOLE]
        okey = f"{i:06d}"
        rows += [(ev.ts, ev.source, okey, p, throughput._compact(text), "t", 0, i) for p in halves]
    return rows


def _batch(rows: list[throughput.Row]) -> Any:
    names = ("ts", "source", "okey", "part", "row", "topic", "partition", "offset")
    cols = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    return pa.RecordBatch.from_pydict(
        {n: cols[n] for n in throughput.WRITE_COLUMNS},
        schema=throughput._arrow(throughput.BUNDLE_SCHEMA),
    )


def _context(folds: dict[str, Fold], routes: tuple[RouteSettings, ...] = ()) -> Any:
    return throughput.WriteContext(
        None,  # type: ignore[arg-type] - no sink: collapse only
        "",
        "job",
        1,
        "{}",
        0,
        1 << 40,
        SCHEMAS,
        routes,
        "identity",
        {},
        {},
        1 << 20,
        {Target("db", "one"): folds, Target("db", "two"): folds},
    )


def _arrow(rows: list[throughput.Row], ctx: Any, chunk: int = 7) -> list[Bulk] | None:
    """`collapsed` of the rows sent in chunks (several record batches, read order kept)."""
    batches = [_batch(rows[i : i + chunk]) for i in range(0, len(rows), chunk)]
    return collapsed(
        batches,
        ctx.schemas.get,
        Router(ctx.routes, ctx.unrouted),
        lambda t: ctx.unique_keys.get(t, ()),
        lambda t: ctx.generated.get(t, frozenset()),
        lambda t: ctx.folds.get(t, {}),
    )


def _one_by_one(rows: list[throughput.Row], ctx: Any) -> dict[Target, TableChanges]:
    ordered = sorted(rows, key=throughput._RELEASE_ORDER)
    return throughput._collapsed(ordered, Router(ctx.routes, ctx.unrouted), ctx)


def _items(tables: dict[Target, TableChanges]) -> dict[Target, tuple[set[str], set[str]]]:
    """Per target (its delete items, its upsert items) as the statements join them."""
    out = {}
    for target, tc in tables.items():
        one = len(tc.key_columns) == 1
        deletes = {str(k[0]) if one else row_of_literals(k) for k in tc.deletes}
        upserts = {row_of_literals(values) for _cols, values, _env in tc.upserts.values()}
        out[target] = (deletes, upserts)
    return out


@settings(max_examples=100)
@given(st.data())
def test_the_arrow_collapse_equals_the_one_collapse(data: Any) -> None:
    """Keys the sink compares exactly: the same last change per key, shuffled read order or
    not (the release order is the sort's), whatever the chunks."""
    rows = _rows(_script(data.draw))
    rows = data.draw(st.permutations(rows))
    ctx = _context(EXACT)
    got = _arrow(rows, ctx, data.draw(st.integers(1, 9)))
    assert got is not None
    expected = _one_by_one(rows, ctx)
    assert {b.target: (set(b.deletes), set(b.upserts)) for b in got if len(b)} == {
        t: items for t, items in _items(expected).items() if any(items)
    }
    assert sum(len(b) for b in got) == sum(len(tc) for tc in expected.values())


@settings(max_examples=30)
@given(st.data())
def test_text_keys_under_a_folding_collation_are_left_to_the_one_collapse(data: Any) -> None:
    """'c' and 'C' are one row to a `_ci` sink: collapse clears one before the other, which
    the Arrow path does not do, so it answers None whenever such a key is there."""
    events = _script(data.draw)
    got = _arrow(_rows(events), _context(TEXT_B))
    if any(ev.table == "two" for ev in events):
        assert got is None
    else:
        assert got is not None


def test_tables_the_one_collapse_must_take_answer_none() -> None:
    ins = [_rows([row(1, Op.INSERT, None, (1, "x"), tbl=ONE)])[0]]
    other_key = _context(EXACT)
    other_key.unique_keys[Target("db", "one")] = (("v",),)
    assert _arrow(ins, other_key) is None
    generated = _context(EXACT)
    generated.generated[Target("db", "one")] = frozenset({"v"})
    assert _arrow(ins, generated) is None
    keyless = TableSchema("db", "keyless", ONE.columns, ())
    text = rendered_row(row(1, Op.INSERT, None, (1, "x"), tbl=keyless))
    assert text is not None
    rows = [(1, "s1", "0", 0, throughput._compact(text), "t", 0, 0)]
    ctx = _context(EXACT)
    ctx.schemas[keyless.schema_id] = keyless
    try:
        assert _arrow(rows, ctx) is None
    finally:
        del ctx.schemas[keyless.schema_id]
    narrow = (1, "s1", "0", 0, f"insert{SEP}{ONE.schema_id}{SEP}-1{SEP}1", "t", 0, 0)
    assert _arrow([narrow], _context(EXACT)) is None  # one value, two columns: collapse raises
    unknown = (1, "s1", "0", 0, f"insert{SEP}999{SEP}-1{SEP}1{SEP}2", "t", 0, 0)
    assert _arrow([unknown], _context(EXACT)) is None


def test_routed_columns_and_skipped_tables() -> None:
    """A route's renamed and excluded columns project as the one collapse projects them; a
    table no route takes is skipped."""
    routes = (
        RouteSettings.model_validate(
            {"match": "db.one", "target": "sink.uno", "rename": {"v": "w"}}
        ),
    )
    events = [
        row(1, Op.INSERT, None, (1, "x"), tbl=ONE),
        row(2, Op.INSERT, None, (2, "y"), tbl=ONE),
        row(3, Op.UPDATE, (2, "y"), (3, "z"), tbl=ONE),
    ]
    ctx = _context(EXACT, routes)
    ctx = throughput.WriteContext(**{**_fields(ctx), "unrouted": "skip"})
    rows = _rows([*events, row(4, Op.INSERT, None, (1, "c", "v"), tbl=TWO)])
    got = _arrow(rows, ctx)
    assert got is not None
    (bulk,) = got
    assert bulk.target == Target("sink", "uno") and bulk.columns == ("k", "w")
    assert (sorted(bulk.deletes), sorted(bulk.upserts)) == (["2"], ["(1,'x')", "(3,'z')"])
    assert _items(_one_by_one(rows, ctx)) == {bulk.target: ({"2"}, {"(1,'x')", "(3,'z')"})}


def _fields(ctx: Any) -> dict[str, Any]:
    return {f: getattr(ctx, f) for f in ctx.__dataclass_fields__}


class _Cursor:
    def __init__(self, refuse: int | None = None) -> None:
        self.sql: list[str] = []
        self.refuse = refuse

    def execute(self, sql: str) -> int:
        import pymysql

        if self.refuse is not None and sql.startswith("INSERT"):
            raise pymysql.err.DataError(self.refuse, "Data truncated for column 'v' at row 1")
        self.sql.append(sql)
        return 1


def test_statements_are_the_one_renderers_and_a_truncation_hands_back() -> None:
    from rowbus.spark_apply.table_writes import write_table

    events = [
        row(1, Op.INSERT, None, (1, "x"), tbl=ONE),
        row(2, Op.INSERT, None, (2, "y"), tbl=ONE),
        row(3, Op.DELETE, (2, "y"), None, tbl=ONE),
        row(4, Op.INSERT, None, (1, "c", "v"), tbl=TWO),
        row(5, Op.DELETE, (1, "c", "v"), None, tbl=TWO),
        row(6, Op.INSERT, None, (2, "c", "v"), tbl=TWO),
    ]
    rows = _rows(events)
    ctx = _context(EXACT)
    got = _arrow(rows, ctx)
    assert got is not None
    cur = _Cursor()
    assert write_bulks(cur, got, 1 << 20) == 4
    one = _Cursor()
    for tc in _one_by_one(rows, ctx).values():
        write_table(one, tc)
    assert cur.sql == one.sql
    assert write_bulks(_Cursor(refuse=1265), got, 1 << 20) is None
