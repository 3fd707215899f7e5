"""rowbus producer: the binlog reader — one MySQL/MariaDB server to the protocol on Kafka.

The data path, one module per step (each testable without services where it can be)::

    binlog.py      mysql-replication in file/position mode → small event values (the one seam
                   around the library, with its reconnect guard)
    streamtables.py a stream's table maps → schemas, converters, native plans; rows decoders
    statements.py  a stream's statement events with their sql_mode, time zone and DDL tracked
    framed.py      the dump stream read past the library: hot event kinds from their bytes
    dumpframes.py  the dump stream cut into event packets from large reads
    eventtypes.py  every binlog event type: decoded, ignored with a reason, or refused
    compressed.py  MariaDB's compressed events inflated into the ordinary ones (bounded)
    payload.py     MySQL's Transaction_payload (zstd) unpacked into its events (streamed)
    tagged.py      MySQL 8.3+'s tagged GTID event (``uuid:tag:N``) read
    tablemaps.py   table maps parsed once per table id and layout
    fastrows.py    rows events decoded by the native `_rows` extension (`_rows.c`)
    values.py      binlog column bytes to protocol values where the library gets them wrong
    jsonb.py       MySQL 8's binary JSON to text (and to a tree, for partial updates)
    jsondiff.py    MySQL 8's partial JSON updates (PARTIAL_JSON diffs) applied to the before
                   image, so the after image is whole
    tables.py      table maps → TableSchema, library values → protocol values, filters (pure)
    tracker.py     the shadow schema at the reader's position, carried through DDL
    definitions.py a table's CREATE statements, published before its first row when the
                   stream has not defined it (PROTOCOL.md §9.6)
    ddl/           the MySQL DDL interpreter the tracker uses (CREATE / ALTER on a table
                   definition)
    online_ddl.py  gh-ost / pt-osc: their tables unpublished, each cut-over RENAME published as
                   the ALTER they made (DM's online-DDL mode; ``reader.online_ddl``)
    txn_control.py transaction-control statements of a binlog, classified (pure)
    assembler.py   events → whole transactions with resume positions (pure)
    batch.py       transactions → records of one Kafka transaction, flush policy (pure)
    records.py     the batcher's events → records: the encoding's seam, rowbus's own (pure)
    debezium.py    the records of the ``debezium`` encoding: data records as Debezium writes them
    fragments.py   huge transactions published in fragments (PROTOCOL.md §9.1)
    publisher.py   the transactional confluent-kafka producer
    checkpoints.py the last ReaderCheckpoint of a source, from the compacted checkpoints topic
    start.py       the reader's configured start position
    server.py      SQL against the source: start-up checks, binlog files and GTIDs
    catalog.py     the source's live tables from information_schema (schemas, definitions)
    locator.py     a start position (GTID, time, file) located in the source's binlog
    history.py     whether the source still holds the history up to a checkpoint
    leader.py      ZooKeeper leadership (kazoo)
    stall.py       committed records a read_committed consumer cannot read (a stuck LSO)
    xa_watch.py    prepared XA transactions that stay prepared
    metrics.py     the reader's counters
    settings.py    the ``reader`` section of the configuration
    exceptions.py  `ReaderError` and its kinds
    term.py        a leadership term: its state, and its opening (checkpoint, resume point,
                   snapshot to begin or continue)
    snapshotting.py the term's initial and incremental snapshots read into its batches
    tail.py        the tail loop: the binlog from the term's position into batches
    commits.py     the commit pipeline: each batch one Kafka transaction with its checkpoint,
                   ended on a thread of its own while the next batch is read
    faults.py      a kill -9 the reader fires itself in or after a snapshot chunk's
                   transaction (tests only, ``ROWBUS_READER_FAULT``)
    reader.py      the election loop composing them; `Reader.run(stop)`
    snapshot/      initial and incremental snapshots (chunked, resumable, `_resultset.c`)
    cluster/       reader cluster nodes: ZooKeeper membership, an elected coordinator, replication
                   sets with two-phase moves, many `Reader` tasks per node (`rowbus reader node`)

`rowbus reader run --source NAME` runs a `Reader` (rowbus/commands/reader.py). This package
imports `rowbus.protocol` and `rowbus.clients` only.

Depends on: `protocol`, `clients`.
"""
