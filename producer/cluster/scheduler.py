"""The coordinator's decisions (pure): from one `ClusterView` and the configured sources, the
replication sets to write, delete, and the operator requests done. Called again after every
change anyone makes, so each call takes every set one step; nothing here waits.

Rules (TiCDC's scheduler, Ptubes' balancing of reader tasks by count):
- a new source is Absent; a set whose owner died loses its owner (its checkpoint stays in Kafka);
- Absent → Prepare on the live, non-draining node with the fewest sets;
- Prepare → Commit once the target reports its task prepared; with no owner, straight to
  Replicating (nobody has anything to commit);
- Commit → Replicating on the target once the owner's task is gone (it committed its last batch
  and stopped); `floor_ts` takes the owner's last watermark;
- a target that dies sends the set back to its owner (or to Absent);
- Replicating with a move request, or on a draining node → Prepare towards the new node;
- when every set is Replicating and no request is pending, one set moves to balance the nodes by
  count and by the load their owners measured (`balance.pick_move`, with hysteresis; never a
  set an operator placed: `pinned`);
- a source no longer configured → Removing; deleted once its owner's task is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rowbus.producer.cluster.balance import DEFAULT_POLICY, LoadPolicy, pick_move
from rowbus.producer.cluster.state import ClusterView, Phase, ReplicationSet, SetState

_ABSENT, _PREPARE, _COMMIT = SetState.ABSENT, SetState.PREPARE, SetState.COMMIT
_REPLICATING, _REMOVING = SetState.REPLICATING, SetState.REMOVING


@dataclass
class Plan:
    """What the coordinator writes: sets to (re)write, sets to delete, move requests done."""

    write: dict[str, ReplicationSet] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    moves_done: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.write or self.delete or self.moves_done)


def _load(sets: Iterable[ReplicationSet], nodes: Iterable[str]) -> dict[str, int]:
    """Sets per node, counting a set at its owner and at its target."""
    load = dict.fromkeys(nodes, 0)
    for s in sets:
        for n in {s.owner, s.target}:
            if n is not None and n in load:
                load[n] += 1
    return load


def _idlest(load: dict[str, int], exclude: str | None = None) -> str | None:
    candidates = [(count, n) for n, count in load.items() if n != exclude]
    return min(candidates)[1] if candidates else None


def schedule(
    sources: Iterable[str],
    view: ClusterView,
    balance: bool = True,
    policy: LoadPolicy = DEFAULT_POLICY,
) -> Plan:
    configured = list(dict.fromkeys(sources))
    live = set(view.nodes)
    eligible = sorted(live - view.drains)
    sets = dict(view.sets)
    for source in configured:
        sets.setdefault(source, ReplicationSet(source))
    plan = Plan()

    def step(s: ReplicationSet) -> ReplicationSet:
        # Forget dead nodes: their sessions ended, so their tasks are gone (or fenced by Kafka).
        if s.owner is not None and s.owner not in live:
            s = replace(s, owner=None, pinned=False)
        if s.target is not None and s.target not in live:
            s = replace(s, target=None)
        if s.source not in configured and s.state is not _REMOVING:
            return ReplicationSet(s.source, _REMOVING, s.owner, None, s.floor_ts)
        owner_phase = view.nodes[s.owner].phase(s.source) if s.owner else None
        target_phase = view.nodes[s.target].phase(s.source) if s.target else None
        match s.state:
            case SetState.ABSENT | SetState.REPLICATING if s.owner is None:
                node = _idlest(_load(sets.values(), eligible))
                return replace(s, state=_PREPARE, target=node) if node else s
            case SetState.PREPARE | SetState.COMMIT if s.target is None:
                return replace(s, state=_REPLICATING if s.owner else _ABSENT, target=None)
            case SetState.PREPARE if target_phase is Phase.PREPARED:
                if s.owner is None:
                    return replace(s, state=_REPLICATING, owner=s.target, target=None)
                return replace(s, state=_COMMIT)
            case SetState.COMMIT if owner_phase is None:
                floor = view.nodes[s.owner].released.get(s.source, 0) if s.owner else 0
                return replace(
                    s,
                    state=_REPLICATING,
                    owner=s.target,
                    target=None,
                    floor_ts=max(s.floor_ts, floor),
                )
            case SetState.REPLICATING:
                wanted = view.moves.get(s.source)
                if wanted is not None and wanted != s.owner and wanted in eligible:
                    return replace(s, state=_PREPARE, target=wanted, pinned=True)
                if s.owner in view.drains:
                    node = _idlest(_load(sets.values(), eligible), exclude=s.owner)
                    if node is not None:
                        return replace(s, state=_PREPARE, target=node, pinned=False)
        return s

    for source in sorted(sets):
        before = sets[source]
        if before.state is _REMOVING and (
            before.owner is None or view.nodes[before.owner].phase(source) is None
        ):
            plan.delete.append(source)
            del sets[source]
            continue
        after = step(before)
        sets[source] = after
        if after != view.sets.get(source):
            plan.write[source] = after
    for source, node in view.moves.items():
        s = sets.get(source)
        if s is None or node not in eligible or (s.owner == node and s.state is _REPLICATING):
            plan.moves_done.append(source)  # done, or impossible: the request is consumed
    if balance and not plan and not view.moves:
        _rebalance(sets, view, eligible, plan, policy)
    return plan


def _rebalance(
    sets: dict[str, ReplicationSet],
    view: ClusterView,
    eligible: list[str],
    plan: Plan,
    policy: LoadPolicy,
) -> None:
    if not eligible or any(s.state is not _REPLICATING for s in sets.values()):
        return
    owners = {s.source: s.owner for s in sets.values() if s.owner is not None}
    loads: dict[str, float | None] = {}
    for source, owner in owners.items():
        task = view.nodes[owner].tasks.get(source) if owner in view.nodes else None
        loads[source] = task.load if task is not None else None
    movable = {s.source for s in sets.values() if not s.pinned}
    move = pick_move(owners, loads, movable, eligible, policy)
    if move is not None:
        source, node = move
        plan.write[source] = replace(sets[source], state=_PREPARE, target=node)
