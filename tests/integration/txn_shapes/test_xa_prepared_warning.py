"""An XA transaction left prepared on a real source: the reader names it once it has been
prepared past `xa_prepared_warn_s` (XID, binlog position, how long) and exports its age; its
metrics clear once it is rolled back."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import pymysql
import pytest

from rowbus.config import Settings
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, reader_thread


def wait_for(check: Callable[[], bool], timeout: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout}s for {what()}")
        time.sleep(0.1)


def test_a_long_prepared_xa_is_warned_about_and_exported(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = services.sources[0]
    db = make_database(server)
    setup = ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=db,
        data_topic=make_topic("data", partitions=1),
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
    xid = unique("xa")
    hex_xid = xid.encode().hex()
    caplog.set_level(logging.WARNING, logger="rowbus.producer.xa_watch")
    with connect(server, db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id INT PRIMARY KEY)")
    try:
        with reader_thread(setup, heartbeat_interval_s=0.3, xa_prepared_warn_s=1.0) as reader:
            m = reader.metrics
            # the reader has its start position (a heartbeat is published only after it)
            wait_for(lambda: m.heartbeats > 0, 60, lambda: f"a first heartbeat: {m.readings()}")
            with connect(server, db) as conn, conn.cursor() as cur:
                cur.execute(f"XA START '{xid}'")
                cur.execute("INSERT INTO a VALUES (1)")
                cur.execute(f"XA END '{xid}'")
                cur.execute(f"XA PREPARE '{xid}'")
            wait_for(
                lambda: any(hex_xid in k for k in m.xa_prepared_age_s),
                timeout=60,
                what=lambda: f"the prepared XA transaction in the metrics: {m.readings()}",
            )
            assert m.xa_prepared == 1
            [age] = m.xa_prepared_age_s.values()
            assert age >= 1.0
            warnings = [r.getMessage() for r in caplog.records if hex_xid in r.getMessage()]
            assert len(warnings) == 1
            assert "binlog" in warnings[0] and "prepared for" in warnings[0]
            with connect(server) as conn, conn.cursor() as cur:
                cur.execute(f"XA ROLLBACK '{xid}'")
            wait_for(
                lambda: m.xa_prepared == 0,
                timeout=60,
                what=lambda: f"the metrics to clear: {m.readings()}",
            )
            assert m.xa_prepared_age_s == {}
            # still one warning: it is named once, not at every check
            assert len([r for r in caplog.records if hex_xid in r.getMessage()]) == 1
    finally:
        with connect(server) as conn, conn.cursor() as cur:
            with contextlib.suppress(pymysql.MySQLError):  # XAER_NOTA: already rolled back
                cur.execute(f"XA ROLLBACK '{xid}'")
