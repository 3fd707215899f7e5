"""Helpers: one huge upstream transaction, a reader process's peak RSS, the checkpoints topic
by key, and the binlog end."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from rowbus.config import MySQLSettings, Settings
from rowbus.protocol.codec import decode
from rowbus.protocol.events import ReaderCheckpoint, Record, RowChange
from tests.conftest import connect

PAD = 200
"""Bytes of padding per row: enough that holding a whole transaction shows in the RSS."""


def create_big_table(server: MySQLSettings, database: str) -> None:
    with connect(server, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id BIGINT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(255))")


def insert_big_transaction(server: MySQLSettings, database: str, rows: int, first: int = 1) -> None:
    """One upstream transaction inserting `rows` rows (ids first..first+rows-1)."""
    with connect(server, database, autocommit=False) as conn, conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO big SELECT seq, seq % 1000, REPEAT(CHAR(65 + seq % 26), {PAD}) "
            f"FROM seq_{first}_to_{first + rows - 1}"
        )
        conn.commit()


def binlog_end(server: MySQLSettings) -> tuple[str, int]:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        assert row is not None
        return str(row[0]), int(row[1])


def peak_rss_mb(pid: int) -> float:
    """The peak resident set size of a live process (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def read_all(services: Settings, topic: str) -> list[tuple[int, int, bytes | None, Record]]:
    """Every committed record of `topic`, (partition, offset, key, record), by a fresh
    read_committed consumer that stops at each partition's end."""
    consumer = Consumer(
        services.kafka.client_config(
            **{
                "group.id": f"test-read-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "receive.message.max.bytes": 500_000_000,
            }
        )
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set()
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                pending.add(p)
        out: list[tuple[int, int, bytes | None, Record]] = []
        for _ in range(10_000):
            if not pending:
                break
            for msg in consumer.consume(10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise AssertionError(f"consume error {err}")
                where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                out.append(
                    (
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        decode(msg.value(), msg.headers(), where),
                    )
                )
        assert not pending, f"{topic}: partitions {pending} never reached their end"
        return out
    finally:
        consumer.close()


def checkpoints_by_key(services: Settings, topic: str) -> list[tuple[bytes, ReaderCheckpoint]]:
    return [
        (k or b"", r) for _, _, k, r in read_all(services, topic) if isinstance(r, ReaderCheckpoint)
    ]


def rows_of(records: list[tuple[int, int, bytes | None, Record]]) -> list[RowChange]:
    return [r for _, _, _, r in records if isinstance(r, RowChange)]
