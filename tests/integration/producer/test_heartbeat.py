"""An idle source advances its watermark every second (the fake binlog)."""

from __future__ import annotations

import itertools
import time

from rowbus.protocol.events import Heartbeat, Resolved
from rowbus.protocol.hlc import physical_ms
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread


def test_idle_source_advances_watermark_every_second(reader_setup: ReaderSetup) -> None:
    setup = reader_setup
    with reader_thread(setup, heartbeat_interval_s=1.0) as reader:
        data = TopicReader(setup.services, setup.data_topic)
        data.until(
            lambda rs: sum(isinstance(r, Heartbeat) for r in rs) >= 4 * len(data.partitions),
            timeout=40,
            what="four heartbeats on every partition",
        )
        now_ms = int(time.time() * 1000)
    data.close()
    for partition in data.partitions:
        marks = [
            r
            for p, _, _, r in data.records
            if p == partition and isinstance(r, Heartbeat | Resolved)
        ]
        beats = [r for r in marks if isinstance(r, Heartbeat)]
        assert len(beats) >= 4
        stamps = [physical_ms(r.ts) for r in beats]
        assert stamps == sorted(stamps)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert max(gaps) <= 1600, f"heartbeat gaps {gaps} ms"
        assert now_ms - stamps[-1] <= 3000
        last = beats[-1]
        assert last.reader_id == reader.reader_id
        assert last.source == setup.source
        assert last.position.file.startswith("binlog")
        ts = [r.ts for r in marks]
        assert ts == sorted(ts), "watermarks never go back"
