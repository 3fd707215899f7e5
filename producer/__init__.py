"""rowbus producer: the binlog reader — one MySQL/MariaDB server to the protocol on Kafka.

The data path, one module per step (each testable without services where it can be)::

    binlog.py      mysql-replication in file/position mode → small event values (the one seam
                   around the library, with its reconnect guard)
    assembler.py   events → whole transactions with resume positions (pure)
    tables.py      table maps → TableSchema, library values → protocol values, filters (pure)
    ddl.py         which table a DDL statement touches (pure)
    batch.py       transactions → records of one Kafka transaction, flush policy (pure)
    publisher.py   the transactional confluent-kafka producer (the one place KafkaError is
                   translated)
    checkpoints.py the last ReaderCheckpoint of a source, from the compacted checkpoints topic
    server.py      SQL against the source: start-up checks, binlog files, start positions
    leader.py      ZooKeeper leadership (kazoo)
    reader.py      the loop tying them together; `Reader.run(stop)`
    cluster/       reader cluster nodes: ZooKeeper membership, an elected coordinator, replication
                   sets with two-phase moves, many `Reader` tasks per node (`rowbus reader node`)

`rowbus reader run --source NAME` runs a `Reader` (rowbus/commands/reader.py).
"""
