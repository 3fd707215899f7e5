"""The merge engine: Kafka partitions in, whole transactions out, in commit order (pure).

Used alike by the Subscriber SDK (`rowbus.consumers`) and the Spark apply job
(`rowbus.spark_apply`); it imports only `rowbus.protocol`.

- `merger`: the watermark merger — the intake rules, release in (ts, source, position) order,
  its state as a value;
- `lanes`: the merger's lanes — watermarks, last positions (the duplicate rule), floors, offsets;
- `stash`: the merger's stash — held transactions, their order, memory bound and spill;
- `cut`: a stashed transaction cut in two around held tables (`Split`);
- `hold`: the shard-DDL hold rule (what of a transaction waits for a shard's DDL lock);
- `positions`: order keys of binlog positions and per-source floors (what is already behind);
- `checkpoint`: the resume point (offsets, floors, watermarks) and its JSON form;
- `trail`: the checkpoint after each released transaction (resume mid-batch);
- `transaction`: a restored transaction and its events (in memory or spilled);
- `spill`: the spill folder for stashed events beyond the memory limit;
- `state`: the merger's whole state as one record to replay from (`MergerState`, which the
  Spark planner's `PlannerState` extends) and its stash entries (`Envelope`);
- `start`: a requested start position (timestamp, GTID, binlog position) as offsets and floors;
- `exceptions`: `SubscriberError`, the root of every subscriber-side error;
- `tables`: the tables a released stream leaves, in memory (the conformance kit's reference);
- `conformance`: the reference program the conformance kit compares others with (PROTOCOL.md
  §10).

Depends on: `protocol`.
"""

from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.merger import Merger
from rowbus.merge.transaction import Transaction

__all__ = ["Checkpoint", "Merger", "Transaction"]
