"""The reader reads its checkpoint up to the high watermark: another producer's transaction
left open on the shared checkpoints topic (which holds the last stable offset back) neither
hands the restarted reader a stale checkpoint (duplicates) nor lets it use an aborted record."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

from confluent_kafka import Producer

from rowbus.protocol.codec import encode
from rowbus.protocol.events import BinlogPosition, ReaderCheckpoint, RowChange
from rowbus.protocol.topics import checkpoint_key
from rowbus.waiting import wait_for
from tests.conftest import connect
from tests.integration.bounded.helpers import read_all, rows_of
from tests.integration.producer.helpers import ReaderSetup, start_reader_process


def _write(setup: ReaderSetup, first: int, n: int) -> None:
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        for key in range(first, first + n):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (key, key))


def _published(setup: ReaderSetup, n: int) -> bool:
    return len(rows_of(read_all(setup.services, setup.data_topic))) >= n


def test_a_foreign_open_transaction_on_the_checkpoints_topic_is_waited_for(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    setup = reader_setup
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    config = setup.write_config(tmp_path / "rowbus.yaml", election=False, flush_interval_s=0.05)
    log = tmp_path / "reader.log"
    proc = start_reader_process(config, setup.source, "r0", log)
    other = Producer(
        setup.services.kafka.client_config(
            **{"transactional.id": f"test-other-{uuid.uuid4().hex}", "linger.ms": 0}
        )
    )
    try:
        wait_for(
            lambda: " leads source " in log.read_text(errors="replace") or proc.poll(),
            timeout=90,
            what="the reader to lead",
        )
        _write(setup, 1, 20)
        wait_for(lambda: _published(setup, 20), timeout=90, what="the first 20 rows")
        # Another producer opens a transaction on the checkpoints topic and keeps it open: it
        # even writes a (bogus) checkpoint under this source's key, which it will abort.
        other.init_transactions(15)
        other.begin_transaction()
        bogus = ReaderCheckpoint(
            source=setup.source,
            position=BinlogPosition("nowhere.000001", 4),
            gtid_set=None,
            ts=1,
            offsets=(),
            reader_id="bogus",
            epoch=999,
        )
        value, headers = encode(bogus)
        other.produce(setup.checkpoints_topic, value, checkpoint_key(setup.source), headers=headers)
        other.flush(15)
        # The reader goes on; its checkpoints land behind the open transaction.
        _write(setup, 21, 20)
        wait_for(lambda: _published(setup, 40), timeout=90, what="rows 21-40")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        mark = len(log.read_text(errors="replace"))
        proc = start_reader_process(config, setup.source, "r1", log)

        def restarted() -> bool:
            text = log.read_text(errors="replace")[mark:]
            return "reading checkpoints from" in text or " leads source " in text

        wait_for(restarted, timeout=90, what="the restarted reader to read its checkpoint")
        other.abort_transaction(15)
        wait_for(
            lambda: " leads source " in log.read_text(errors="replace")[mark:] or proc.poll(),
            timeout=90,
            what="the restarted reader to lead",
        )
        assert proc.poll() is None, "the restarted reader died"
        _write(setup, 41, 20)
        wait_for(lambda: _published(setup, 60), timeout=90, what="rows 41-60")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    rows = rows_of(read_all(setup.services, setup.data_topic))
    ids = sorted(r.image[0] for r in rows if isinstance(r, RowChange))
    assert ids == list(range(1, 61)), (
        f"{len(ids)} row events for 60 rows: the restart resumed from a stale checkpoint"
    )
    text = log.read_text(errors="replace")
    assert "nowhere.000001" not in text, "the aborted checkpoint was used"
    assert "Traceback" not in text
