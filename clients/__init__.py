"""The seams around foreign clients, one per client, below every component.

Each foreign client is built in one module here and its errors are translated here, so every
component gets the same defaults and the same classification (retryable or not):

- `rowbus.clients.kafka`: confluent-kafka consumers, producers and admin clients, reading a small
  system topic to its end, and KafkaException translation;
- `rowbus.clients.mysql`: pymysql connections and MySQL error-code classification;
- `rowbus.clients.zookeeper`: kazoo clients, started with a deadline;
- `rowbus.clients.election`: the one election interface (ZooKeeper, or unopposed);
- `rowbus.clients.prometheus`: the metrics exporter every long-running process serves;
- `rowbus.clients.settings`: the strict settings base and the one MySQL connection type;
- `rowbus.clients.errors`: the foreign clients' errors as the seams translate them;
- `rowbus.clients.faults`: the one reading of a test-only fault hook's variable.

This package sits between `rowbus.protocol` and the components (producer, merge, routing,
shard_ddl, consumers, spark_apply): it imports only `rowbus.protocol` and the foreign libraries,
never a component or the shell (`tests/unit/test_layout.py`).

Depends on: `protocol`.
"""
