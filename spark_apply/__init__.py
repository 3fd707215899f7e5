"""The Spark apply job: protocol events from Kafka into MySQL/MariaDB (or Iceberg), exactly once.

Data path: `source` (a Python streaming data source on confluent-kafka, or Spark's own `kafka`
format) → `job` (foreachBatch on the driver) → `planner` (stash + watermarks + release, cut at
DDL, over the merge engine `rowbus.merge`; pure Python) → `rowbus.routing` (upstream tables →
target tables, column filters) → `sink` (collapse per key, upserts/deletes, the checkpoint and
the next stash in the same transaction); `shard_ddl` hooks `rowbus.shard_ddl` into the planner.

Modules, by role:

- `job`: the query and its foreachBatch;
- `source`, `rendered`, `boundaries`, `consumers_kept`: Kafka read on the executors, records
  rendered there, each partition's last read offsets checked again before reading on, the
  consumers a Python worker keeps between reads;
- `planner`, `sink_spill`, `state_store`, `gc_pause`: the batch plan over the merge engine, its
  stash and state in the sink, the paused garbage collector;
- `sinks`, `ledger`, `sink_conn`: the seam every kind of sink plugs into (`sinks.SinkKind`)
  and the step loop over it (`sinks.Sink`), the job's head, checkpoints, state and gates in
  the state database, the sink's connections and their errors;
- `sink`, `sink_schema`, `table_writes`, `shard_writes`: the MySQL sink (its kind of sink,
  `sink.MySQLRows`), what the sink's information_schema says of a target, collapsed changes
  as SQL, parallel mode's shards;
- `changes`, `causality`, `keys`, `literals`, `enum_error`: the writes (collapse, key conflicts,
  the key the sink's collation sees, SQL literals, the ENUM error value a STRICT sink refuses);
- `iceberg_sink`, `iceberg_schema`, `iceberg_types`, `iceberg_keyless`: the Iceberg sink
  (`apply.sink_kind: iceberg`, its kind of sink `iceberg_sink.IcebergRows`): a step's rows
  into Iceberg tables (current state, change log) beside the MySQL state database's
  checkpoints, the tables' schemas and their evolution, the MySQL → Iceberg type mapping,
  and the current state of a table without a primary key;
- `iceberg_catalog`, `iceberg_maintenance`, `iceberg_faults`: the Iceberg catalog and the job's
  marks in snapshot summaries, compaction / expiry / orphan files, and the faults the tests
  inject at a commit (kill -9, a racing compaction);
- `iceberg_files`: a step's Iceberg data files written by executor tasks, their metadata
  handed to the driver's commit (``apply.iceberg.writers: executors``);
- `ddl`, `catalog`, `shard_ddl`: DDL barriers, schemas by id, shard-DDL coordination;
- `snapshots`: the statements that apply snapshot markers (seen-key sets in the sink);
- `overlap`, `recovery`: a batch's write overlapping the next read, riding out a sink outage;
- `owned`, `throughput`, `release`, `ownership`, `arrow_collapse`: throughput mode (opt-in):
  the driver's steps, the executors' keying and owned writes, the release from lane summaries,
  the owner of a row, a write task's collapse over its Arrow rows;
- `settings`, `metrics`, `progress`, `stall`, `exceptions`: configuration, counters, the
  progress API for tools, the stall report (what held events wait for), errors;
- `apply_faults`: the kill -9 at a step's commit the tests of the driver inject;
- `quiet_daemon`: PySpark's daemon for the job's Python workers, quiet when the JVM hangs up.

This package imports `protocol`, `clients`, `merge`, `routing` and `shard_ddl` of ours, never
the Subscriber SDK (`consumers`); pyspark is imported lazily where it is needed, so the planner,
routing and sink work (and are tested) without it.

Depends on: `protocol`, `clients`, `merge`, `routing`, `shard_ddl`.
"""
