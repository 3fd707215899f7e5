"""RESET MASTER on the checkpoint's own server (same identity, history gone): the reader stops
with one line saying what to change, or with ``reader.snapshot: when_needed`` takes a fresh
snapshot and continues at the next upstream epoch, so order keys keep growing.

The reset needs a server of its own: resetting the shared stack's sources would pull the binlog
from under every other test's reader."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rowbus.config import MySQLSettings
from rowbus.producer.history import BinlogResetError
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings
from rowbus.protocol.events import Op, RowChange, order_key
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.producer.helpers import (
    ReaderSetup,
    TopicReader,
    private_source,
    reader_thread,
)


@pytest.fixture
def own_server(reader_setup: ReaderSetup, tmp_path: Path) -> Iterator[ReaderSetup]:
    """The test's reader setup, its source a MariaDB of its own (binlog on, GTIDs)."""
    with private_source(reader_setup, tmp_path, 93) as setup:
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{setup.database}`.t (id INT PRIMARY KEY, v INT)")
        yield setup


def _write(server: MySQLSettings, database: str, ids: range) -> None:
    with connect(server) as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute(f"INSERT INTO `{database}`.t VALUES (%s, %s)", (i, i * 10))
            conn.commit()


def _rows(data: TopicReader) -> list[tuple[int, RowChange]]:
    return [(p, r) for p, _, _, r in data.records if isinstance(r, RowChange)]


def test_reset_master_stops_with_one_line_or_continues_at_the_next_upstream(
    own_server: ReaderSetup,
) -> None:
    setup = own_server
    data = TopicReader(setup.services, setup.data_topic)
    try:
        with reader_thread(setup, start="latest") as reader:
            wait_for(lambda: reader.committed is not None, timeout=60, what="a first checkpoint")
            _write(setup.server, setup.database, range(1, 6))
            data.until(
                lambda rs: sum(isinstance(r, RowChange) for r in rs) >= 5,
                timeout=120,
                what="the five rows before the reset",
            )
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute("RESET MASTER")
        _write(setup.server, setup.database, range(6, 9))

        # Without a setting that allows otherwise: one line naming the setting, and stop.
        settings = ReaderSettings(**setup.reader_settings(election=False, start="latest"))
        stopped = Reader(setup.source_connection(), settings, setup.services_for_reader())
        stop, failed = threading.Event(), []

        def run() -> None:
            try:
                stopped.run(stop)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(60)
        stop.set()  # a reader that did not notice keeps reading meaningless offsets: stop it
        thread.join(30)
        assert failed and isinstance(failed[0], BinlogResetError), failed
        line = str(failed[0])
        assert "\n" not in line and "RESET MASTER" in line
        assert "reader.snapshot: when_needed" in line and "upstream epoch" in line

        # With snapshot when_needed: a fresh snapshot (every row, as reads) at upstream 1, then
        # the stream at upstream 1.
        with reader_thread(setup, snapshot="when_needed") as reader:
            data.until(
                lambda rs: (
                    {r.after[0] for r in rs if isinstance(r, RowChange) and r.op is Op.READ}
                    >= set(range(1, 9))
                ),
                timeout=120,
                what="the snapshot after the reset",
            )
            _write(setup.server, setup.database, range(9, 11))
            data.until(
                lambda rs: (
                    {r.after[0] for r in rs if isinstance(r, RowChange) and r.op is Op.INSERT}
                    >= {9, 10}
                ),
                timeout=120,
                what="rows written after the new snapshot",
            )
            assert reader.committed is not None and reader.committed.upstream == 1
    finally:
        data.close()
    rows = _rows(data)
    before = [r for _, r in rows if r.position.upstream == 0]
    after = [r for _, r in rows if r.position.upstream == 1]
    assert sorted(r.after[0] for r in before if r.after) == [1, 2, 3, 4, 5]
    assert all(r.op is Op.INSERT for r in before)
    assert sorted(r.after[0] for r in after if r.op is Op.INSERT and r.after) == [9, 10]
    for partition in data.partitions:
        keys = [order_key(r) for p, r in rows if p == partition]
        assert keys == sorted(keys) and len(set(keys)) == len(keys), (
            f"order keys do not grow on partition {partition}"
        )
