"""The reader produces a batch's records before its commit and ends a due commit on a thread of
its own while it reads on (`CommitPipeline.send_ready`, `CommitPipeline.commit` with ``wait=False``): a
commit that fails there (its records already produced, the next batch already being read) must
still end with every row published exactly once, in binlog order per key."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rowbus.producer import commits as commits_module
from rowbus.producer.exceptions import PublishError
from rowbus.producer.publisher import KafkaPublisher
from rowbus.protocol.events import Op, Record, RowChange
from tests.conftest import connect
from tests.integration.producer.helpers import ReaderSetup, TopicReader, reader_thread

TXNS = 40
ROWS_PER_TXN = 10


def _rows(records: list[Record]) -> list[RowChange]:
    return [r for r in records if isinstance(r, RowChange)]


def test_failed_commits_on_the_commit_thread_lose_and_repeat_nothing(
    reader_setup: ReaderSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = reader_setup
    # Records go out in small slices ahead of the commit, and batches are due by rows count,
    # so most commits end on the commit thread with produced records behind them.
    monkeypatch.setattr(commits_module, "SEND_RECORDS", 7)
    commits = [0]
    failed: list[str] = []
    real_commit = KafkaPublisher.commit

    def flaky_commit(self: KafkaPublisher) -> None:
        commits[0] += 1
        if commits[0] in (4, 9):
            failed.append(threading.current_thread().name)
            raise PublishError("injected commit failure", "TEST", retryable=True)
        real_commit(self)

    monkeypatch.setattr(KafkaPublisher, "commit", flaky_commit)
    with connect(setup.server, setup.database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    with reader_thread(setup, flush_rows=25, flush_interval_s=5.0) as reader:
        data = TopicReader(setup.services, setup.data_topic)
        # The reader leads (its first commit) before the rows are written.
        data.until(bool, timeout=60, what="the reader's first commit")
        with connect(setup.server, setup.database, autocommit=False) as conn:
            with conn.cursor() as cur:
                for t in range(TXNS):
                    cur.executemany(
                        "INSERT INTO t VALUES (%s, %s)",
                        [(t * ROWS_PER_TXN + i, 0) for i in range(ROWS_PER_TXN)],
                    )
                    conn.commit()
                for t in range(TXNS):
                    cur.execute(
                        "UPDATE t SET v = v + 1 WHERE id BETWEEN %s AND %s",
                        (t * ROWS_PER_TXN, t * ROWS_PER_TXN + ROWS_PER_TXN - 1),
                    )
                    conn.commit()
        total = 2 * TXNS * ROWS_PER_TXN
        data.until(lambda rs: len(_rows(rs)) >= total, timeout=120, what=f"{total} row changes")
        errors = dict(reader.metrics.errors)
    data.close()
    assert len(failed) == 2, f"the injected failures happened ({failed})"
    assert "rowbus-commit" in failed, "a commit on the commit thread failed"
    assert errors.get("PublishError", 0) >= 2
    rows = _rows([r for _, _, _, r in data.records])
    seen: dict[tuple[Any, ...], int] = {}
    for row in rows:
        key = (row.op, row.after)
        seen[key] = seen.get(key, 0) + 1
    assert len(rows) == total, f"{len(rows)} row changes for {total} rows written"
    assert all(n == 1 for n in seen.values()), "a row change was published twice"
    by_key: dict[int, list[RowChange]] = {}
    for _, _, _, r in sorted(data.records, key=lambda x: (x[0], x[1])):
        if isinstance(r, RowChange):
            assert r.after is not None
            by_key.setdefault(int(r.after[0]), []).append(r)  # type: ignore[arg-type]
    assert len(by_key) == TXNS * ROWS_PER_TXN
    for changes in by_key.values():
        assert [c.op for c in changes] == [Op.INSERT, Op.UPDATE]
        assert [c.after[1] for c in changes if c.after is not None] == [0, 1]
