"""A huge upstream transaction: the reader publishes it in fragments with bounded memory, a
kill -9 between fragments neither loses nor repeats any of it, and a Subscriber receives it
whole, once (PROTOCOL.md §9.1)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.transaction import Transaction
from rowbus.protocol.events import Heartbeat, ReaderCheckpoint, Resolved, RowChange
from rowbus.protocol.topics import checkpoint_key, fragment_key
from rowbus.waiting import wait_for
from tests.definitions import is_definition_txn
from tests.integration.bounded.helpers import (
    binlog_end,
    checkpoints_by_key,
    create_big_table,
    insert_big_transaction,
    peak_rss_mb,
    read_all,
)
from tests.integration.producer.helpers import ReaderSetup, start_reader_process

ROWS = 200_000
FRAGMENT_ROWS = 5_000
READER_RSS_MB = 200
"""The reader's peak RSS bound for this test: it holds one fragment, not the transaction (a
whole 200k-row transaction of 200-byte rows alone takes well over 200 MB in the reader)."""


def _start(setup: ReaderSetup, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        election=False,
        flush_interval_s=0.05,
        fragment_rows=FRAGMENT_ROWS,
    )
    return start_reader_process(config, setup.source, name, tmp_path / "reader.log")


def _checkpointed(setup: ReaderSetup, end: tuple[str, int]) -> bool:
    key = checkpoint_key(setup.source)
    return any(
        k == key and (r.position.file, r.position.offset) >= end
        for k, r in checkpoints_by_key(setup.services, setup.checkpoints_topic)
    )


def _first_checkpoint(setup: ReaderSetup, proc: subprocess.Popen[bytes]) -> None:
    wait_for(
        lambda: checkpoints_by_key(setup.services, setup.checkpoints_topic) or proc.poll(),
        timeout=90,
        what="the reader's first checkpoint",
    )
    assert proc.poll() is None, "the reader died"


def _check_big_transaction(setup: ReaderSetup) -> str:
    """The data topic holds the big transaction exactly once, whole, with no watermark passing
    it before its last event; returns its id."""
    records = read_all(setup.services, setup.data_topic)
    rows = [r for _, _, _, r in records if isinstance(r, RowChange)]
    txns = {r.txn.id for r in rows}
    assert len(txns) == 1, f"expected one transaction, got {len(txns)}"
    indexes = sorted(r.txn.index for r in rows)
    assert indexes == list(range(ROWS)), (
        f"{len(indexes)} events, {len(set(indexes))} distinct indexes: lost or repeated events"
    )
    assert sorted(r.image[0] for r in rows) == list(range(1, ROWS + 1))
    assert len({r.ts for r in rows}) == 1, "the fragments of one transaction carry several ts"
    ts = rows[0].ts
    counts = {r.txn.count for r in rows}
    assert None in counts, "the transaction was not published in fragments"
    assert counts == {None, ROWS}, counts
    assert max(r.txn.index for r in rows if r.txn.count is None) < min(
        r.txn.index for r in rows if r.txn.count == ROWS
    ), "only the last fragment carries the count"
    # No watermark passes the transaction before its last event in a partition.
    last: dict[int, int] = {}
    for p, offset, _, r in records:
        if isinstance(r, RowChange):
            last[p] = offset
    for p, offset, _, r in records:
        if isinstance(r, Resolved | Heartbeat) and offset < last.get(p, -1):
            assert r.ts < ts, f"partition {p}@{offset}: watermark {r.ts} passed the transaction"
    return rows[0].txn.id


def _subscribe(setup: ReaderSetup, group: str) -> list[Transaction]:
    got: list[Transaction] = []
    ids: list[int] = []
    with Subscriber(
        setup.services.kafka.client_config(),
        [setup.data_topic],
        checkpoints_topic=setup.checkpoints_topic,
        schemas_topic=setup.schemas_topic,
        group_id=group,
        memory_limit=20_000,
    ) as sub:

        def handle(txn: Transaction) -> None:
            if is_definition_txn(txn):
                return  # the table existed before the reader (PROTOCOL.md §9.6)
            got.append(txn)
            ids.extend(e.image[0] for e in txn.events if isinstance(e, RowChange))  # type: ignore[misc]

        sub.run(handle, idle_timeout=60, should_stop=lambda: len(ids) >= ROWS)
    assert len(got) == 1, got
    assert sorted(ids) == list(range(1, ROWS + 1))
    return got


def test_huge_transaction_is_published_in_fragments_with_bounded_memory(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    setup = reader_setup
    create_big_table(setup.server, setup.database)
    proc = _start(setup, tmp_path, "r0")
    try:
        _first_checkpoint(setup, proc)
        insert_big_transaction(setup.server, setup.database, ROWS)
        end = binlog_end(setup.server)
        wait_for(
            lambda: _checkpointed(setup, end) or proc.poll() is not None,
            timeout=300,
            what=f"the reader to checkpoint binlog {end}",
        )
        assert proc.poll() is None, "the reader died"
        peak = peak_rss_mb(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    print(f"reader peak RSS {peak:.0f} MiB")
    assert peak <= READER_RSS_MB, f"reader peak RSS {peak:.0f} MiB > {READER_RSS_MB} MiB"
    _check_big_transaction(setup)
    _subscribe(setup, f"{setup.source}-sub")
    assert "Traceback" not in (tmp_path / "reader.log").read_text(errors="replace")


def test_kill_9_between_fragments_loses_and_repeats_nothing(
    reader_setup: ReaderSetup, tmp_path: Path
) -> None:
    setup = reader_setup
    create_big_table(setup.server, setup.database)
    proc = _start(setup, tmp_path, "r0")
    fragment = fragment_key(setup.source)
    try:
        _first_checkpoint(setup, proc)
        insert_big_transaction(setup.server, setup.database, ROWS)
        end = binlog_end(setup.server)

        def mid_fragments() -> bool:
            stored = checkpoints_by_key(setup.services, setup.checkpoints_topic)
            return any(k == fragment for k, _ in stored) and not _checkpointed(setup, end)

        wait_for(mid_fragments, timeout=300, what="a fragment record before the commit")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        before = [
            r
            for k, r in checkpoints_by_key(setup.services, setup.checkpoints_topic)
            if k == fragment
        ]
        assert before, "no fragment record committed before the kill"
        proc = _start(setup, tmp_path, "r1")
        wait_for(
            lambda: _checkpointed(setup, end) or proc.poll() is not None,
            timeout=300,
            what=f"the restarted reader to checkpoint binlog {end}",
        )
        assert proc.poll() is None, "the restarted reader died"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    _check_big_transaction(setup)
    _subscribe(setup, f"{setup.source}-sub")
    log = (tmp_path / "reader.log").read_text(errors="replace")
    assert "was publishing transaction" in log, "the restart did not resume the fragments"
    assert isinstance(before[-1], ReaderCheckpoint)
