"""The Subscriber and `rowbus tail` on a real broker: merged order, and kill -9 resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from rowbus.config import Settings
from rowbus.consumers.stores import FileCheckpointStore
from rowbus.consumers.subscriber import Subscriber
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.transaction import Transaction
from rowbus.waiting import wait_for
from tests.integration.consumers.publisher import TestPublisher, publish_in_background, txn_events

ROOT = Path(__file__).resolve().parents[3]


def reference(sources: list[str], n: int) -> list[tuple[str, int]]:
    """(txn id, ts) of every transaction, in merged order."""
    return [
        (f"{s}-{k}", txn_events(s, k, rank)[0].ts)
        for k in range(n)
        for rank, s in enumerate(sources)
    ]


def test_subscriber_merges_two_sources_in_ts_order(
    services: Settings, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    sources = [make_topic("a"), make_topic("b")]
    for rank, source in enumerate(sources):
        TestPublisher(services, source, rank).publish(range(20))
    store = FileCheckpointStore(tmp_path / "ckpt.json")
    got: list[Transaction] = []
    with Subscriber(
        services.kafka.client_config(),
        sources,
        store=store,
        sources=sources,
        topic_template="{source}",
        checkpoints_topic=make_topic("ckpt", partitions=1),
        schemas_topic=make_topic("schemas", partitions=1),
        memory_limit=5,
    ) as sub:
        # src-b's last transaction waits for src-a's watermark to pass it
        sub.run(got.append, max_transactions=39, idle_timeout=10)
        # spilled events are read back while the subscriber is open
        assert [(t.id, t.ts) for t in got] == reference(sources, 20)[:39]
        for t in got:
            k = int(t.id.rsplit("-", 1)[1])
            assert list(t.events) == txn_events(t.source, k, sources.index(t.source))
    assert Checkpoint.from_json((tmp_path / "ckpt.json").read_text()) == got[-1].checkpoint


def test_tail_resumes_after_kill_9_without_loss_or_duplicate_beyond_its_checkpoint(
    services: Settings, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    sources = [make_topic("a"), make_topic("b")]
    config = tmp_path / "rowbus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "kafka": {"bootstrap_servers": services.kafka.bootstrap_servers},
                "subscriber": {
                    "sources": sources,
                    "topic_template": "{source}",
                    "checkpoints_topic": make_topic("ckpt", partitions=1),
                    "schemas_topic": make_topic("schemas", partitions=1),
                },
            }
        )
    )
    checkpoint = tmp_path / "tail.ckpt"
    total = 300

    def tail(out: Path, *extra: str) -> subprocess.Popen[bytes]:
        with out.open("wb") as f:
            return subprocess.Popen(
                [
                    *(sys.executable, "-m", "rowbus", "-c", str(config), "tail", *sources),
                    *("--checkpoint-file", str(checkpoint), *extra),
                ],
                cwd=ROOT,
                # As a user runs it: stdout to a file is block-buffered (this machine's
                # PYTHONUNBUFFERED hid a loss at kill -9 behind the checkpoint).
                env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
                stdout=f,
            )

    writer = publish_in_background(services, sources, total)
    first_out = tmp_path / "first.jsonl"
    first = tail(first_out)
    try:
        wait_for(
            lambda: first_out.read_bytes().count(b"\n") >= 100 and checkpoint.exists(),
            timeout=60,
            what="the first tail to print 100 transactions",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        writer.join(60)
    saved = Checkpoint.from_json(checkpoint.read_text())
    second_out = tmp_path / "second.jsonl"
    second = tail(second_out, "--idle-timeout", "3")
    assert second.wait(90) == 0

    def ids(path: Path) -> list[tuple[str, int]]:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        return [(r["txn"], r["ts"]) for r in lines]

    before, after = ids(first_out), ids(second_out)
    everything = reference(sources, total)
    # the last transaction of the last source waits for a watermark that never comes
    everything = everything[:-1]
    # no loss: the second run printed exactly what comes after the checkpoint, in order
    assert after == [(i, ts) for i, ts in everything if ts > saved.ts]
    # no duplicate at or before the checkpoint: the first run printed a prefix of the reference
    assert before == everything[: len(before)]
    # and no loss behind the checkpoint: what it covers was printed before it was saved (a
    # line still in the killed process's stdout buffer was lost with it)
    assert before and before[-1][1] >= saved.ts, (
        f"the checkpoint (ts {saved.ts}) is past the last line printed ({before[-1]})"
    )
    assert all(ts > saved.ts for _, ts in set(before) & set(after))
