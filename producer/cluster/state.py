"""What the reader cluster keeps in ZooKeeper, as frozen values (pure, no I/O).

Layout under ``<root>/cluster`` (`Paths`)::

    nodes/<node>        ephemeral, one per live node: its `NodeStatus` (tasks, phases, watermarks)
    coordinator/        kazoo's election recipe: the first contender is the coordinator
    sets/<source>       persistent, written by the coordinator only: the source's `ReplicationSet`
    moves/<source>      an operator's request to move a source to a node (the node's name)
    drains/<node>       an operator's request to move every source off a node

A replication set goes through the seed's states (TiCDC's scheduler)::

    Absent ──▶ Prepare ──▶ Commit ──▶ Replicating ──▶ Removing ──▶ (deleted)
                 │ target prepares     │ owner commits its last batch and stops,
                 │ (connects, schemas) │ then the target publishes from that checkpoint
                 └── no owner (new source, dead owner): straight to Replicating on the target
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum


class SetState(StrEnum):
    ABSENT = "absent"
    PREPARE = "prepare"
    COMMIT = "commit"
    REPLICATING = "replicating"
    REMOVING = "removing"


class Phase(StrEnum):
    """Where a node's reader task for one source is."""

    PREPARING = "preparing"
    """Started: connecting to the source and Kafka, checking topics."""
    PREPARED = "prepared"
    """Ready to publish, waiting for the coordinator's grant (nothing published)."""
    REPLICATING = "replicating"
    """Granted: publishing (fenced the previous owner, resumed from the checkpoint)."""


@dataclass(frozen=True)
class ReplicationSet:
    """Who replicates `source`: the `owner` publishes, the `target` prepares to take over.
    `floor_ts` is the last watermark the previous owner committed (a drain waits until the new
    owner's watermark reaches it)."""

    source: str
    state: SetState = SetState.ABSENT
    owner: str | None = None
    target: str | None = None
    floor_ts: int = 0
    pinned: bool = False
    """Placed by an operator (`rowbus reader move`): the balancer leaves it where it is."""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "state": self.state.value,
                "owner": self.owner,
                "target": self.target,
                "floor_ts": self.floor_ts,
                "pinned": self.pinned,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, source: str, data: bytes) -> ReplicationSet:
        raw = json.loads(data or b"{}")
        return cls(
            source,
            SetState(raw.get("state", "absent")),
            raw.get("owner"),
            raw.get("target"),
            int(raw.get("floor_ts", 0)),
            bool(raw.get("pinned", False)),
        )


@dataclass(frozen=True)
class TaskStatus:
    phase: Phase
    ts: int = 0
    """The watermark (ts) of the task's last committed Kafka transaction; 0 before the first."""
    load: float | None = None
    """Rows/s the task published over its last measuring window; None until one window passed
    (`balance.LoadMeter`)."""


@dataclass(frozen=True)
class NodeStatus:
    """What a node reports in its ephemeral znode: its running tasks, and for each source it
    gave up, the last watermark it committed (`released`)."""

    node: str
    tasks: dict[str, TaskStatus] = field(default_factory=dict)
    released: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "tasks": {s: [t.phase.value, t.ts, t.load] for s, t in sorted(self.tasks.items())},
                "released": dict(sorted(self.released.items())),
            }
        ).encode()

    @classmethod
    def decode(cls, node: str, data: bytes) -> NodeStatus:
        raw = json.loads(data or b"{}")
        # [phase, ts] from nodes that do not measure load yet, [phase, ts, load] from others.
        tasks = {
            s: TaskStatus(Phase(t[0]), int(t[1]), None if len(t) < 3 or t[2] is None else t[2])
            for s, t in raw.get("tasks", {}).items()
        }
        released = {s: int(ts) for s, ts in raw.get("released", {}).items()}
        return cls(node, tasks, released)

    def phase(self, source: str) -> Phase | None:
        task = self.tasks.get(source)
        return task.phase if task is not None else None


@dataclass(frozen=True)
class Paths:
    """The cluster's znodes under a deployment's ZooKeeper root."""

    root: str

    @property
    def base(self) -> str:
        return f"{self.root.rstrip('/')}/cluster"

    @property
    def nodes(self) -> str:
        return f"{self.base}/nodes"

    @property
    def sets(self) -> str:
        return f"{self.base}/sets"

    @property
    def moves(self) -> str:
        return f"{self.base}/moves"

    @property
    def drains(self) -> str:
        return f"{self.base}/drains"

    @property
    def coordinator(self) -> str:
        return f"{self.base}/coordinator"

    def node(self, name: str) -> str:
        return f"{self.nodes}/{name}"

    def set(self, source: str) -> str:
        return f"{self.sets}/{source}"

    def move(self, source: str) -> str:
        return f"{self.moves}/{source}"

    def drain(self, node: str) -> str:
        return f"{self.drains}/{node}"


@dataclass(frozen=True)
class ClusterView:
    """One read of the whole cluster state (by the coordinator, the agents or the CLI)."""

    nodes: dict[str, NodeStatus]
    sets: dict[str, ReplicationSet]
    moves: dict[str, str]
    drains: frozenset[str]
