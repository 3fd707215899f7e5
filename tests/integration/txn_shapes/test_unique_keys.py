"""Apply under unique keys, on the real sink: random histories of row changes over a table with
a primary key and two more unique keys (one of two columns), every change a valid upstream
transaction, applied by the sink as one step; the target must equal the history applied one
change at a time, and no write may fail. Unique values move between rows and swap (through a
NULL, as a source must), primary keys change."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rowbus.config import Settings
from rowbus.protocol.events import BinlogPosition, ColumnSchema, Op, RowChange, TableSchema, TxnRef
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.causality import conflict_groups
from rowbus.spark_apply.literals import as_literals
from rowbus.spark_apply.planner import Envelope, PlannerState, plan
from rowbus.spark_apply.settings import SinkConnection
from rowbus.spark_apply.sink import MySQLSink
from tests.conftest import connect
from tests.unit.spark_apply.events import resolved

Row = tuple[int, int | None, int | None, int | None]
UP = TableSchema(
    "up",
    "t",
    tuple(ColumnSchema(c, "int", nullable=c != "id") for c in ("id", "u1", "u2", "v")),
    ("id",),
)
UNIQUE = ((1,), (2, 3))  # u1; (u2, v)
VALUES = st.sampled_from([None, 0, 1, 2, 3])


@dataclass
class History:
    initial: list[Row]
    changes: list[tuple[Op, Row | None, Row | None]]
    final: dict[int, Row]


def _fits(model: dict[int, Row], row: Row, replacing: int | None) -> bool:
    for key in UNIQUE:
        value = tuple(row[i] for i in key)
        if any(v is None for v in value):
            continue
        for pk, other in model.items():
            if pk != replacing and tuple(other[i] for i in key) == value:
                return False
    return row[0] == replacing or row[0] not in model


@st.composite
def histories(draw: st.DrawFn) -> History:
    model: dict[int, Row] = {}
    initial: list[Row] = []
    for pk in range(draw(st.integers(0, 6))):
        row: Row = (pk, draw(VALUES), draw(VALUES), draw(VALUES))
        if _fits(model, row, None):
            model[pk] = row
            initial.append(row)
    changes: list[tuple[Op, Row | None, Row | None]] = []

    def update(old: Row, new: Row) -> None:
        changes.append((Op.UPDATE, old, new))
        del model[old[0]]
        model[new[0]] = new

    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["insert", "update", "update", "delete", "swap", "rekey"]))
        pks = sorted(model)
        if kind == "insert" or not pks:
            row = (draw(st.integers(0, 9)), draw(VALUES), draw(VALUES), draw(VALUES))
            if _fits(model, row, None):
                changes.append((Op.INSERT, None, row))
                model[row[0]] = row
        elif kind == "delete":
            old = model.pop(draw(st.sampled_from(pks)))
            changes.append((Op.DELETE, old, None))
        elif kind == "swap" and len(pks) > 1:
            a, b = draw(st.permutations(pks))[:2]
            ra, rb = model[a], model[b]
            update(ra, (a, None, ra[2], ra[3]))
            update(rb, (b, ra[1], rb[2], rb[3]))
            update(model[a], (a, rb[1], ra[2], ra[3]))
        else:
            old = model[draw(st.sampled_from(pks))]
            pk = draw(st.integers(0, 9)) if kind == "rekey" else old[0]
            new = (pk, draw(VALUES), draw(VALUES), draw(VALUES))
            if _fits(model, new, old[0]) and (pk == old[0] or pk not in model):
                update(old, new)
    return History(initial, changes, dict(model))


def envelopes(history: History) -> list[Envelope]:
    out = []
    for n, (op, before, after) in enumerate(history.changes, start=1):
        event = RowChange(
            source="s1",
            ts=n,
            op=op,
            schema=UP.schema,
            table=UP.table,
            schema_id=UP.schema_id,
            primary_key=UP.primary_key,
            before=before,
            after=after,
            txn=TxnRef(f"t{n}", 0, 1),
            position=BinlogPosition("bin.000001", n * 10),
        )
        out.append(Envelope("topic", 0, n, event))
    out.append(Envelope("topic", 0, len(out) + 1, resolved(len(history.changes) + 1)))
    return out


@pytest.fixture
def target(services: Settings, make_database: Callable[..., str]) -> str:
    db = make_database(services.resolved_sink)
    with connect(services.resolved_sink, db) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, u1 INT NULL, u2 INT NULL, v INT NULL, "
            "UNIQUE KEY uk1 (u1), UNIQUE KEY uk2 (u2, v)) ENGINE=InnoDB"
        )
    return db


@pytest.mark.parametrize("mode", ["snapshot", "parallel"])
@settings(
    derandomize=True,  # the same examples on every CI run
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories())
def test_a_step_under_unique_keys_equals_the_changes_applied_one_by_one(
    services: Settings, target: str, mode: str, history: History
) -> None:
    check(services, target, mode, history)


def check(services: Settings, target: str, mode: str, history: History) -> None:
    """`history` applied by the sink as one step equals it applied one change at a time."""
    s = services.resolved_sink
    with connect(s, target) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM t")
        if history.initial:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s, %s)", history.initial)
    router = Router([RouteSettings(match="up.*", target=f"{target}.{{table}}")], unrouted="error")
    sink = MySQLSink(
        SinkConnection(host=s.host, port=s.port, user=s.user, password=s.password),
        f"job_{mode}_{uuid.uuid4().hex[:8]}",  # a fresh job: no state of an earlier example
        f"{target}_state",
        router,
        {UP.schema_id: UP}.get,
        mode=mode,
        parallelism=3,
    )
    with sink:
        p = plan(sink.previous_state(0) or PlannerState(), envelopes(history), [("topic", 0, "s1")])
        sink.apply(0, p)
    with connect(s, target) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, u1, u2, v FROM t ORDER BY id")
        got = [tuple(r) for r in cur.fetchall()]
    assert got == [history.final[k] for k in sorted(history.final)]


def test_conflict_groups_join_rows_that_share_a_unique_value() -> None:
    cols = ("id", "u1", "u2", "v")
    images = {
        (1,): [(cols, (1, 5, None, 0)), (cols, (1, None, None, 0)), (cols, (1, 6, None, 0))],
        (2,): [(cols, (2, 6, None, 0)), (cols, (2, 5, None, 0))],
        (3,): [(cols, (3, 7, 1, 1))],
        (4,): [(cols, (4, None, 1, 1))],
        (5,): [(cols, (5, None, None, 1))],
    }
    # As collapse hands them over: images of SQL literals (NULL is ``NULL``).
    rendered = {k: [(c, as_literals(v)) for c, v in seen] for k, seen in images.items()}
    groups = conflict_groups(rendered, (("u1",), ("u2", "v")))
    assert groups == [[(1,), (2,)], [(3,), (4,)]]


SWAP = History(
    initial=[(1, 1, None, None), (2, 2, None, None)],
    changes=[
        (Op.UPDATE, (1, 1, None, None), (1, None, None, None)),
        (Op.UPDATE, (2, 2, None, None), (2, 1, None, None)),
        (Op.UPDATE, (1, None, None, None), (1, 2, None, None)),
    ],
    final={1: (1, 2, None, None), 2: (2, 1, None, None)},
)
MOVE = History(
    initial=[(1, 5, None, None)],
    changes=[
        (Op.INSERT, None, (3, None, None, None)),
        (Op.UPDATE, (1, 5, None, None), (1, None, None, None)),
        (Op.UPDATE, (3, None, None, None), (3, 5, None, None)),
    ],
    final={1: (1, None, None, None), 3: (3, 5, None, None)},
)


@pytest.mark.parametrize("mode", ["snapshot", "parallel"])
@pytest.mark.parametrize("history", [SWAP, MOVE], ids=["swap", "move"])
def test_swapped_and_moved_unique_values(
    services: Settings, target: str, mode: str, history: History
) -> None:
    check(services, target, mode, history)
