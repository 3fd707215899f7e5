"""Balancing by count and measured load (`rowbus.producer.cluster.balance`), without services."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rowbus.producer.cluster.balance import LoadMeter, LoadPolicy, pick_move
from rowbus.producer.cluster.scheduler import schedule
from rowbus.producer.cluster.state import (
    ClusterView,
    NodeStatus,
    Phase,
    ReplicationSet,
    SetState,
    TaskStatus,
)
from rowbus.testing import FakeClock

POLICY = LoadPolicy()


def _settle(
    owners: dict[str, str],
    loads: dict[str, float | None],
    movable: set[str],
    nodes: list[str],
    limit: int,
) -> int:
    """Apply moves until none is picked; the number of moves (fails past `limit`)."""
    for moves in range(limit + 1):
        move = pick_move(owners, loads, movable, nodes, POLICY)
        if move is None:
            return moves
        source, target = move
        assert target != owners[source] and source in movable and target in nodes
        owners[source] = target
    raise AssertionError(f"still moving after {limit} moves: {owners}")


placements = st.integers(2, 4).flatmap(
    lambda n_nodes: st.tuples(
        st.just([f"n{i}" for i in range(n_nodes)]),
        st.lists(
            st.tuples(
                st.integers(0, n_nodes - 1),
                st.one_of(st.none(), st.floats(0, 5000, allow_nan=False)),
                st.booleans(),
            ),
            min_size=0,
            max_size=12,
        ),
    )
)


@settings(max_examples=300, deadline=None)
@given(placements)
def test_moves_stop_and_leave_counts_within_the_skew(placement) -> None:
    nodes, rows = placement
    owners = {f"s{i}": nodes[n] for i, (n, _load, _pin) in enumerate(rows)}
    loads = {f"s{i}": load for i, (_n, load, _pin) in enumerate(rows)}
    movable = {f"s{i}" for i, (_n, _load, pinned) in enumerate(rows) if not pinned}
    _settle(owners, loads, movable, nodes, limit=200)
    if movable == set(owners):
        counts = [sum(o == n for o in owners.values()) for n in nodes]
        measured = bool(owners) and all(v is not None for v in loads.values())
        assert max(counts) - min(counts) <= (POLICY.count_skew if measured else 1)


@settings(max_examples=200, deadline=None)
@given(placements, st.floats(0.3, 1.0))
def test_a_settled_placement_stays_when_the_traffic_falls(placement, noise: float) -> None:
    """Once settled, every source's load falling by the same factor moves nothing: the ratio
    and improvement thresholds are relative, and smaller gaps pass the min gap less often."""
    nodes, rows = placement
    owners = {f"s{i}": nodes[n] for i, (n, _load, _pin) in enumerate(rows)}
    loads = {f"s{i}": load for i, (_n, load, _pin) in enumerate(rows)}
    movable = set(owners)
    _settle(owners, loads, movable, nodes, limit=200)
    scaled = {s: None if v is None else v * noise for s, v in loads.items()}
    assert pick_move(owners, scaled, movable, nodes, POLICY) is None


def test_a_heavy_source_is_not_stacked_on_another() -> None:
    # Counts are balanced (2/2) but n0 carries both heavy sources.
    owners = {"h1": "n0", "h2": "n0", "l1": "n1", "l2": "n1"}
    loads: dict[str, float | None] = {"h1": 3000.0, "h2": 2800.0, "l1": 10.0, "l2": 20.0}
    move = pick_move(owners, loads, set(owners), ["n0", "n1"], POLICY)
    assert move in {("h1", "n1"), ("h2", "n1")}
    owners[move[0]] = "n1"
    assert pick_move(owners, loads, set(owners), ["n0", "n1"], POLICY) is None  # 1/3: settled


def test_no_load_move_until_every_set_is_measured_nor_within_the_dead_band() -> None:
    owners = {"a": "n0", "b": "n0", "c": "n1", "d": "n1"}
    unmeasured: dict[str, float | None] = {"a": 3000.0, "b": 2800.0, "c": None, "d": 20.0}
    assert pick_move(owners, unmeasured, set(owners), ["n0", "n1"], POLICY) is None
    close: dict[str, float | None] = {"a": 120.0, "b": 100.0, "c": 10.0, "d": 20.0}
    assert pick_move(owners, close, set(owners), ["n0", "n1"], POLICY) is None  # gap < min_gap
    similar: dict[str, float | None] = {"a": 3000.0, "b": 2800.0, "c": 2500.0, "d": 2000.0}
    assert pick_move(owners, similar, set(owners), ["n0", "n1"], POLICY) is None  # ratio < 1.5


def test_scheduler_balances_by_the_loads_owners_report() -> None:
    def status(node: str, loads: dict[str, float]) -> NodeStatus:
        return NodeStatus(node, {s: TaskStatus(Phase.REPLICATING, 5, v) for s, v in loads.items()})

    nodes = [status("a", {"h1": 3000.0, "h2": 2900.0}), status("b", {"l1": 5.0, "l2": 5.0})]
    sets = {s: ReplicationSet(s, SetState.REPLICATING, n.node) for n in nodes for s in n.tasks}
    v = ClusterView({n.node: n for n in nodes}, sets, {}, frozenset())
    plan = schedule(sorted(sets), v)
    assert list(plan.write.values()) == [
        ReplicationSet("h2", SetState.PREPARE, "a", "b")
    ]  # leaves 2900+10 vs 3000


def test_load_travels_in_the_node_status() -> None:
    status = NodeStatus("a", {"s1": TaskStatus(Phase.REPLICATING, 7, 123.0)})
    assert NodeStatus.decode("a", status.encode()) == status
    old = b'{"tasks": {"s1": ["replicating", 7]}, "released": {}}'
    assert NodeStatus.decode("a", old).tasks["s1"] == TaskStatus(Phase.REPLICATING, 7, None)


def test_meter_reports_nothing_before_a_whole_window_then_rows_per_second() -> None:
    clock = FakeClock()
    meter = LoadMeter(10.0, clock=clock)
    assert meter.rate(0) is None
    for second in range(1, 10):
        clock.advance(1.0)
        assert meter.rate(second * 100) is None
    for second in range(10, 30):
        clock.advance(1.0)
        assert meter.rate(second * 100) == 100.0
    clock.advance(10.0)  # idle for a window: the old samples drop out
    assert meter.rate(2900) == 0.0
