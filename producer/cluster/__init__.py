"""The reader cluster: many sources over many nodes (TiCDC's scheduler, Ptubes' reader service).

    state.py      the znodes' values: replication sets and their states, node statuses (pure)
    scheduler.py  the coordinator's decisions from one view of the cluster (pure)
    balance.py    which one set the coordinator moves to balance the nodes (pure)
    zk.py         reading and writing those znodes (kazoo)
    task.py       one source's `Reader` in a thread, granted by the coordinator (`TaskLease`)
    node.py       `rowbus reader node`: membership, agent, coordinator election
    admin.py      `rowbus reader nodes|move|drain`
    settings.py   ``reader.cluster``

Nothing here is imported by `rowbus.producer.settings` but `settings.py` (no cycle).
"""
