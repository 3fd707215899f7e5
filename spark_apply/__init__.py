"""The Spark apply job: protocol events from Kafka into MySQL/MariaDB (or Iceberg), exactly once.

Data path: `source` (a Python streaming data source on confluent-kafka, or Spark's own `kafka`
format) → `job` (foreachBatch on the driver) → `planner` (stash + watermarks + release, cut at
DDL, over the merge engine `rowbus.merge`; pure Python) → `rowbus.routing` (upstream tables →
target tables, column filters) → `sink` (collapse per key, upserts/deletes, the checkpoint and
the next stash in the same transaction); `shard_ddl` hooks `rowbus.shard_ddl` into the planner.

Modules, by role:

- `job`: the query and its foreachBatch;
- `source`, `rendered`, `boundaries`: Kafka read on the executors, records rendered there,
  each partition's last read offsets checked again before reading on;
- `planner`, `pieces`, `state_store`, `collector`: the batch plan over the merge engine, its
  stash and state in the sink, the paused garbage collector;
- `sink`, `changes`, `causality`, `keys`, `literals`, `lenient`, `shard_writes`: the writes
  (collapse, key conflicts, the key the sink's collation sees, SQL literals, parallel shards);
- `iceberg_sink`, `iceberg_types`, `iceberg_catalog`, `iceberg_maintenance`, `iceberg_faults`: the
  Iceberg sink (`apply.sink_kind: iceberg`): a step's rows into Iceberg tables (current state,
  change log) beside the MySQL sink's checkpoints, the MySQL → Iceberg type mapping, the
  catalog and the job's marks in snapshot summaries, compaction / expiry / orphan files, and
  the faults the tests inject at a commit (kill -9, a racing compaction);
- `ddl`, `catalog`, `shard_ddl`: DDL barriers, schemas by id, shard-DDL coordination;
- `snapshots`: the statements that apply snapshot markers (seen-key sets in the sink);
- `overlap`, `recovery`: a batch's write overlapping the next read, riding out a sink outage;
- `owned`, `throughput`, `release`, `ownership`: throughput mode (opt-in): the driver's steps,
  the executors' keying and owned writes, the release from lane summaries, the owner of a row;
- `settings`, `metrics`, `progress`, `stall`, `exceptions`: configuration, counters, the
  progress API for tools, the stall report (what held events wait for), errors.

This package imports `protocol`, `clients`, `merge`, `routing` and `shard_ddl` of ours, never
the Subscriber SDK (`consumers`); pyspark is imported lazily where it is needed, so the planner,
routing and sink work (and are tested) without it.
"""
