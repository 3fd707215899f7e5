"""A reader killed with a Kafka transaction open, then its successor's commits: a read_committed
consumer that starts anywhere past the aborted transaction reads every later commit.

On noida-db it did not: the broker lists, in a fetch answer, aborted transactions that ended
before the fetched offset, and librdkafka then drops that producer's records until an abort
marker it never meets. With one transactional.id per source for ever, the successor wrote as
the same producer, and every commit after the kill was hidden from such fetches — the apply
job starts each range where the last one ended, a Subscriber resumes from its checkpoint
(docs/operations.md). Each reader term now writes with an id of its own, claimed on the writers
topic (`KafkaPublisher.rotate`); this test fails on the code before that.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from rowbus.clients import kafka
from rowbus.config import Settings
from rowbus.producer.faults import ENV as FAULT
from rowbus.protocol.topics import writers_topic
from tests.integration.producer.helpers import TopicReader, start_reader_process
from tests.integration.snapshot.helpers import fill, snapshot_state
from tests.integration.snapshot.test_initial import _setup

ROWS_PER_TABLE = 100
CHUNK_ROWS = 25
"""800 rows in 32 chunks; the first reader kills itself in the chunk transaction that takes its
snapshot past `KILL_AT`, with the chunk delivered and not committed."""
KILL_AT = 200


def _read(services: Settings, topic: str, start: int, isolation: str) -> list[int]:
    """The offsets of partition 0 of `topic` a fresh consumer reads from `start` to the end."""
    consumer = Consumer(
        services.kafka.client_config(
            **{
                "group.id": f"test-{uuid.uuid4().hex[:8]}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "receive.message.max.bytes": 200_000_000,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return offsets
                raise AssertionError(f"consume error {err}")
            offsets.append(msg.offset() or 0)
        raise AssertionError(f"{topic}[0] from {start} not read to its end in 30 s")
    finally:
        consumer.close()


def test_commits_after_a_killed_transaction_are_read_from_any_offset_past_its_abort(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
    tmp_path: Path,
) -> None:
    setup = replace(
        _setup(services, make_topic, make_database, unique),
        data_topic=make_topic("data1", partitions=1),
    )
    fill(setup.server, setup.database, ROWS_PER_TABLE)
    config = setup.write_config(
        tmp_path / "rowbus.yaml",
        snapshot="initial",
        snapshot_chunk_rows=CHUNK_ROWS,
        heartbeat_interval_s=0.3,
    )
    log = tmp_path / "reader.log"
    index = TopicReader(services, setup.checkpoints_topic)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = start_reader_process(
            config, setup.source, "reader-a", log, {FAULT: f"kill-in-snapshot:{KILL_AT}"}
        )
        procs.append(first)
        try:
            code = first.wait(120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"reader-a did not kill itself at {KILL_AT} rows") from None
        assert code == -signal.SIGKILL, f"reader-a ended with {code}, not its kill -9"
        procs.append(start_reader_process(config, setup.source, "reader-b", log))
        index.until(
            lambda rs: (s := snapshot_state(rs, setup.source)) is not None and s.done,
            timeout=180,
            what="the second reader to finish the snapshot",
        )
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        index.close()

    topic = setup.data_topic
    everything = _read(services, topic, 0, "read_uncommitted")
    committed = _read(services, topic, 0, "read_committed")
    aborted = sorted(set(everything) - set(committed))
    assert aborted, "the killed reader left no aborted records: the kill missed its transaction"
    later = [o for o in committed if o > aborted[-1]]
    assert len(later) > 100, f"the second reader committed only {len(later)} records after it"
    # The abort marker sits right after the aborted records; a fetch that starts past it, in the
    # middle of the later commits or at the last of them gets all that follow.
    for start in (aborted[-1] + 2, later[len(later) // 2], later[-1]):
        got = _read(services, topic, start, "read_committed")
        assert got == [o for o in later if o >= start], (
            f"{topic}[0] read_committed from {start}: {len(got)} records of "
            f"{len([o for o in later if o >= start])} committed (aborted: {aborted[0]}-"
            f"{aborted[-1]})"
        )
    # Two terms, two ids, each claimed once, the second after the first.
    writers = writers_topic(setup.checkpoints_topic)
    claims = [
        bytes(m.value() or b"").decode()
        for m in kafka.read_messages_to_end(services.kafka.client_config(), writers)
    ]
    assert len(claims) == 2 and claims[0] != claims[1], claims
    assert [c.rsplit(".w", 1)[1] for c in claims] == ["1", "2"], claims
