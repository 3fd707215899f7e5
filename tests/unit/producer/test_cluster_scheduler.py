"""The coordinator's decisions, step by step, without services."""

from __future__ import annotations

from dataclasses import replace

from rowbus.producer.cluster.scheduler import Plan, schedule
from rowbus.producer.cluster.state import (
    ClusterView,
    NodeStatus,
    Phase,
    ReplicationSet,
    SetState,
    TaskStatus,
)

R, P, C = SetState.REPLICATING, SetState.PREPARE, SetState.COMMIT


def node(name: str, released: dict[str, int] | None = None, **tasks: Phase) -> NodeStatus:
    return NodeStatus(name, {s: TaskStatus(p, 5) for s, p in tasks.items()}, released or {})


def view(
    nodes: list[NodeStatus],
    sets: list[ReplicationSet],
    moves: dict[str, str] | None = None,
    drains: frozenset[str] = frozenset(),
) -> ClusterView:
    return ClusterView({n.node: n for n in nodes}, {s.source: s for s in sets}, moves or {}, drains)


def apply(v: ClusterView, plan: Plan) -> dict[str, ReplicationSet]:
    sets = {**v.sets, **plan.write}
    for source in plan.delete:
        del sets[source]
    return sets


def test_new_sources_spread_over_nodes_by_count() -> None:
    v = view([node("a"), node("b"), node("c")], [])
    plan = schedule([f"s{i}" for i in range(6)], v)
    assert {s.state for s in plan.write.values()} == {P}
    targets = [s.target for s in plan.write.values()]
    assert sorted(targets.count(n) for n in "abc") == [2, 2, 2]
    assert all(s.owner is None for s in plan.write.values())


def test_prepared_without_owner_goes_straight_to_replicating() -> None:
    v = view([node("a", s1=Phase.PREPARED)], [ReplicationSet("s1", P, None, "a")])
    assert schedule(["s1"], v).write["s1"] == ReplicationSet("s1", R, "a", None)
    # Not prepared yet: nothing to do.
    v = view([node("a", s1=Phase.PREPARING)], [ReplicationSet("s1", P, None, "a")])
    assert not schedule(["s1"], v)


def test_move_is_two_phase_and_carries_the_owners_last_watermark() -> None:
    start = ReplicationSet("s1", R, "a", None)
    v = view([node("a", s1=Phase.REPLICATING), node("b")], [start], moves={"s1": "b"})
    plan = schedule(["s1"], v)
    assert plan.write["s1"] == ReplicationSet("s1", P, "a", "b", pinned=True)
    # The target prepares; the owner keeps publishing meanwhile.
    s = plan.write["s1"]
    v = view([node("a", s1=Phase.REPLICATING), node("b", s1=Phase.PREPARED)], [s], {"s1": "b"})
    s = schedule(["s1"], v).write["s1"]
    assert (s.state, s.owner, s.target) == (C, "a", "b")
    # The owner still runs its task (committing its last batch): wait.
    v = view([node("a", s1=Phase.REPLICATING), node("b", s1=Phase.PREPARED)], [s], {"s1": "b"})
    assert not schedule(["s1"], v).write
    # The owner released at watermark 42: the target publishes, the request is done.
    v = view([node("a", {"s1": 42}), node("b", s1=Phase.PREPARED)], [s], {"s1": "b"})
    plan = schedule(["s1"], v)
    assert plan.write["s1"] == ReplicationSet("s1", R, "b", None, 42, pinned=True)
    v = view([node("a"), node("b", s1=Phase.REPLICATING)], [plan.write["s1"]], {"s1": "b"})
    assert schedule(["s1"], v).moves_done == ["s1"]


def test_dead_owner_restarts_elsewhere_and_dead_target_falls_back() -> None:
    v = view([node("b")], [ReplicationSet("s1", R, "a", None, pinned=True)])
    assert schedule(["s1"], v).write["s1"] == ReplicationSet("s1", P, None, "b")
    v = view([node("a", s1=Phase.REPLICATING)], [ReplicationSet("s1", P, "a", "b")])
    assert schedule(["s1"], v).write["s1"] == ReplicationSet("s1", R, "a", None)
    v = view([node("a")], [ReplicationSet("s1", C, "a", "b")])
    assert schedule(["s1"], v).write["s1"] == ReplicationSet("s1", R, "a", None)
    v = view([], [ReplicationSet("s1", C, "a", "b")])
    assert schedule(["s1"], v).write["s1"] == ReplicationSet("s1", SetState.ABSENT)


def test_drain_moves_every_source_off_the_node() -> None:
    sets = [ReplicationSet(f"s{i}", R, "a") for i in range(3)]
    v = view([node("a"), node("b"), node("c")], sets, drains=frozenset({"a"}))
    plan = schedule([s.source for s in sets], v)
    assert {s.owner for s in plan.write.values()} == {"a"}
    assert sorted(s.target or "" for s in plan.write.values()) == ["b", "b", "c"]


def test_balance_moves_one_unpinned_set_at_a_time() -> None:
    sets = [ReplicationSet(f"s{i}", R, "a") for i in range(4)]
    v = view([node("a"), node("b")], sets)
    plan = schedule([s.source for s in sets], v)
    assert list(plan.write.values()) == [ReplicationSet("s0", P, "a", "b")]
    pinned = [replace(s, pinned=True) for s in sets]
    assert not schedule([s.source for s in sets], view([node("a"), node("b")], pinned))
    # Nothing moves while any set is in transition.
    busy = [*sets[:3], ReplicationSet("s3", P, "a", "b")]
    assert not schedule([s.source for s in sets], view([node("a"), node("b")], busy)).write


def test_removed_source_is_stopped_then_deleted() -> None:
    v = view([node("a", s1=Phase.REPLICATING)], [ReplicationSet("s1", R, "a")])
    assert schedule([], v).write["s1"].state is SetState.REMOVING
    v = view([node("a")], [ReplicationSet("s1", SetState.REMOVING, "a")])
    assert schedule([], v).delete == ["s1"]


def test_node_status_and_set_round_trip() -> None:
    status = node("a", {"s2": 9}, s1=Phase.PREPARED)
    assert NodeStatus.decode("a", status.encode()) == status
    rset = ReplicationSet("s1", C, "a", "b", 7, pinned=True)
    assert ReplicationSet.decode("s1", rset.encode()) == rset


def test_agent_runs_prepares_and_stops_tasks_as_the_sets_say() -> None:
    from rowbus.producer.cluster.node import ClusterNode
    from rowbus.producer.settings import ReaderSettings, Services

    agent = ClusterNode(
        {},
        ReaderSettings(cluster={"node_id": "a"}),  # type: ignore[arg-type]
        Services(kafka={}, zookeeper_hosts="127.0.0.1:1"),
    )
    sets = {
        "own": ReplicationSet("own", R, "a"),
        "leaving": ReplicationSet("leaving", P, "a", "b"),  # still publishes until Commit
        "handing": ReplicationSet("handing", C, "a", "b"),  # commits its last batch, stops
        "coming": ReplicationSet("coming", C, "b", "a"),  # prepared, waits for the grant
        "other": ReplicationSet("other", R, "b"),
    }
    assert agent._desired(sets) == {"own": True, "leaving": True, "coming": False}


def test_balance_skips_a_node_whose_sets_are_all_pinned() -> None:
    sets = [
        *(ReplicationSet(f"p{i}", R, "a", pinned=True) for i in range(4)),
        *(ReplicationSet(f"s{i}", R, "b") for i in range(3)),
    ]
    v = view([node("a"), node("b"), node("c")], sets)
    plan = schedule([s.source for s in sets], v)
    assert list(plan.write.values()) == [ReplicationSet("s0", P, "b", "c")]


class _DroppingClient:
    """Answers like kazoo, except that its first `ensure_path` loses the connection."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.drops = 1

    def ensure_path(self, path: str) -> None:
        from kazoo.exceptions import ConnectionLoss

        if self.drops:
            self.drops -= 1
            raise ConnectionLoss()

    def delete(self, path: str) -> None:
        from kazoo.exceptions import NoNodeError

        raise NoNodeError()

    def create(self, path: str, value: bytes, ephemeral: bool) -> None:
        self.created.append(path)


def test_a_node_registers_again_after_a_connection_lost_while_registering() -> None:
    import threading

    from rowbus.producer.cluster.node import ClusterNode
    from rowbus.producer.settings import ReaderSettings, Services

    agent = ClusterNode(
        {},
        ReaderSettings(cluster={"node_id": "a"}),  # type: ignore[arg-type]
        Services(kafka={}, zookeeper_hosts="127.0.0.1:1"),
    )
    client = _DroppingClient()
    agent._client = client
    agent._register(threading.Event())  # raised ZooKeeperClientError (ConnectionLoss) before
    assert client.drops == 0
    assert client.created == [agent.paths.node("a")]
