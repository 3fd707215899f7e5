"""Snapshots: the rows a source held before the binlog window, published as `Op.READ` rows.

An initial snapshot (`SnapshotMode`) runs when a reader leads a source for the first time:
`rowbus.producer.snapshot.source` opens consistent, lock-free read views at one exact binlog
position, `runner` reads every table in primary-key chunks on parallel connections and hands
them to the reader, which commits each chunk with its checkpoint (holding `SnapshotState`) in one
Kafka transaction; after the last chunk the reader streams the binlog from the snapshot's
position. A reader killed mid-snapshot resumes from its last committed chunk (see `state`).

- `source`: consistent, lock-free read views of a MariaDB source, and primary-key chunk reads;
- `runner`: reads the pending tables in chunks on parallel read views;
- `resultset`, `values`: a chunk's result set read in bulk (native `_resultset.c` when built),
  its values as the binlog path decodes them;
- `initial`: starting or resuming a snapshot, and the streamed changes a snapshot row covers;
- `incremental`, `signals`: snapshots while streaming, asked for on the control topic;
- `state`, `progress`: what the reader's checkpoint carries, and the progress log.
"""

from rowbus.producer.snapshot.state import SnapshotMode, SnapshotState, TableProgress

__all__ = ["SnapshotMode", "SnapshotState", "TableProgress"]
