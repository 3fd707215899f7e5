"""A loopback MySQL 8.4 primary for tests (no MySQL 8 server can be installed here).

wire.py     the server side of the client/server protocol: packets, greeting,
            caching_sha2_password (fast, full over TLS, full with the RSA exchange), results
events.py   binlog events from MySQL's documented formats (header, CRC32, GTID, tagged
            GTID, Query, Xid, Rotate, Format_description, Previous_gtids, heartbeat)
rows.py     Table_map with FULL metadata, v2 Rows events (and Partial_update_rows), each
            column type's binary form
jsonb.py    MySQL's binary JSON
jsondiff.py MySQL's JSON diffs (binlog_row_value_options=PARTIAL_JSON) and what they do
binlog.py   a binlog (files of events) from declarative transactions
primary.py  the server: statements a reader sends, COM_BINLOG_DUMP(_GTID)
"""
