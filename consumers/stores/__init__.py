"""Checkpoint stores: where a subscriber keeps its `Checkpoint`.

One abstract class (`CheckpointStore`) and four backends, each tested by one behaviour suite:

=====================  ====================================  ============================
backend                where                                 guarantee
=====================  ====================================  ============================
`FileCheckpointStore`  a local file, replaced atomically     at least once
`KafkaOffsetStore`     the consumer group's committed        at least once
                       offsets (checkpoint in the metadata)
`ZooKeeperStore`       a znode (Ptubes' storage point)       at least once
`SqlCheckpointStore`   a table in the user's own database,   exactly once when written with
                       written in the user's transaction     `save_in` inside that transaction
=====================  ====================================  ============================

- `base`: the `CheckpointStore` boundary;
- `file`, `kafka`, `zookeeper`, `sql`: the four backends above.

Backends with foreign clients import them lazily, so ``import rowbus.consumers.stores`` needs
neither kazoo nor pymysql.
"""

from rowbus.consumers.stores.base import CheckpointStore, Guarantee, MemoryCheckpointStore
from rowbus.consumers.stores.file import FileCheckpointStore
from rowbus.consumers.stores.kafka import KafkaOffsetStore
from rowbus.consumers.stores.sql import SqlCheckpointStore
from rowbus.consumers.stores.zookeeper import ZooKeeperStore

__all__ = [
    "CheckpointStore",
    "FileCheckpointStore",
    "Guarantee",
    "KafkaOffsetStore",
    "MemoryCheckpointStore",
    "SqlCheckpointStore",
    "ZooKeeperStore",
]
