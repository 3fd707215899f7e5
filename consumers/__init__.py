"""The Subscriber SDK: subscribe to rowbus topics and receive whole transactions in commit order.

``from rowbus.consumers import Subscriber`` is the entry point; the merge engine under it lives in
`rowbus.merge` (``Merger`` is re-exported here for code written against earlier versions).

- `subscriber`: `Subscriber` — read, merge, hand out transactions, commit checkpoints;
- `sharded`: sharded consumption (ZooKeeper membership, partition ownership);
- `sharded_apply`: a subscriber that applies shard groups' DDL through `rowbus.shard_ddl`;
- `stores`: checkpoint stores (file, Kafka, SQL, ZooKeeper);
- `settings`: the ``subscriber`` section of the configuration;
- `exceptions`: the SDK's errors (re-exporting the engine's).

Depends on: `protocol`, `clients`, `merge`, `routing`, `shard_ddl`.
"""

from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.merger import Merger

__all__ = ["Merger", "Subscriber"]
