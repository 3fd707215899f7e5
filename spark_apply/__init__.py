"""The Spark apply job: protocol events from Kafka into MySQL/MariaDB, exactly once.

Data path: `source` (a Python streaming data source on confluent-kafka, or Spark's own `kafka`
format) → `job` (foreachBatch on the driver) → `planner` (stash + watermarks + release, cut at
DDL; pure Python) → `routing` (upstream tables → target tables, column filters) → `sink`
(collapse per key, upserts/deletes, the checkpoint and the next stash in the same transaction).

This package imports only `protocol` and `consumers` of ours; pyspark is imported lazily where
it is needed, so the planner, routing and sink work (and are tested) without it.
"""
