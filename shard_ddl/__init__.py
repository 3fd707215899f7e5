"""Shard-DDL coordination over the control topic (TiDB-DM's pessimistic and optimistic modes).

See README.md in this folder for the protocol: records, lock states, failure cases.

- `locks`: the pure lock state machine (`LockTable.apply(record)`), replayable from the topic;
- `ddl`: retargeting, normalising and classifying statements;
- `groups`: shard groups from routing;
- `gate`: the participant's holding of a shard's events behind its lock (pure);
- `wedge`: the wedge report — a lock waiting too long, named with its missing shards (pure);
- `control`, `election`, `executor`: the control topic, the ZooKeeper election, the sink;
- `coordinator`: one apply job's end of it all;
- `records`: control records' details and lock ids;
- `exceptions`: `ShardDdlError` and its kinds.

Depends on: `protocol`, `clients`, `merge`.
"""

from rowbus.shard_ddl.gate import Barrier, ShardGate
from rowbus.shard_ddl.groups import ShardGroups, shard_name
from rowbus.shard_ddl.locks import Lock, LockState, LockTable, replay

__all__ = [
    "Barrier",
    "Lock",
    "LockState",
    "LockTable",
    "ShardGate",
    "ShardGroups",
    "replay",
    "shard_name",
]
