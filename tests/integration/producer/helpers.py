"""Helpers for reader integration tests: a config per test, the reader as a thread or a
subprocess, and a read_committed reader of the topics it writes."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from rowbus.clients.settings import SourceConnection
from rowbus.config import MySQLSettings, Settings
from rowbus.local.procs import ProcessRecord, launch, port_is_free
from rowbus.local.services import MariaDB
from rowbus.producer.reader import Reader
from rowbus.producer.settings import ReaderSettings, Services
from rowbus.protocol.codec import decode
from rowbus.protocol.events import Record
from rowbus.waiting import wait_for
from tests import proclogs
from tests.conftest import connect

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def private_source(
    setup: ReaderSetup, folder: Path, server_id: int, extra: tuple[str, ...] = ()
) -> Iterator[ReaderSetup]:
    """`setup` with its source a MariaDB of its own (binlog on, GTIDs, the server options
    `extra`) holding an empty database `setup.database`, for a test that resets the binlog
    (RESET MASTER on the shared stack's sources would pull it from under every other test's
    reader) or needs a server setting no other test may see."""
    port = _free_port()
    assert port_is_free(port)
    name = f"own{server_id}"
    server = MariaDB(
        name, port, f"test.{name}", folder / name, server_id=server_id, binlog=True, extra=extra
    )
    server.prepare()
    record = ProcessRecord(
        server.name, launch(server.command(), server.log_file), server.marker, server.address
    )
    try:
        wait_for(server.ready, timeout=120, what="the server to start")
        server.after_ready()
        settings = setup.server.model_copy(update={"port": port})
        with connect(settings) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{setup.database}`")
        yield dataclasses.replace(setup, server=settings)
    finally:
        server.shutdown(record)


@dataclass
class ReaderSetup:
    """Everything one test's reader uses: unique source name, topics and database."""

    services: Settings
    server: MySQLSettings
    source: str
    database: str
    data_topic: str
    checkpoints_topic: str
    schemas_topic: str
    extra: dict[str, Any] = field(default_factory=dict)

    def reader_settings(self, **overrides: Any) -> dict[str, Any]:
        return {
            "start": "latest",
            "include_schemas": [self.database],
            "topic_template": self.data_topic,
            "checkpoints_topic": self.checkpoints_topic,
            "schemas_topic": self.schemas_topic,
            "flush_interval_s": 0.1,
            **self.extra,
            **overrides,
        }

    def source_connection(self) -> SourceConnection:
        return SourceConnection(
            name=self.source,
            host=self.server.host,
            port=self.server.port,
            user=self.server.user,
            password=self.server.password,
        )

    def services_for_reader(self, session_timeout_s: float = 2.0) -> Services:
        return Services(
            kafka=self.services.kafka.client_config(),
            zookeeper_hosts=self.services.zookeeper.hosts,
            zookeeper_root=self.services.zookeeper.root,
            zookeeper_session_timeout_s=session_timeout_s,
        )

    def write_config(self, path: Path, session_timeout_s: float = 2.0, **overrides: Any) -> Path:
        config = {
            "kafka": {"bootstrap_servers": self.services.kafka.bootstrap_servers},
            "zookeeper": {
                "hosts": self.services.zookeeper.hosts,
                "session_timeout_s": session_timeout_s,
            },
            "sources": [
                {
                    "name": self.source,
                    "host": self.server.host,
                    "port": self.server.port,
                    "user": self.server.user,
                    "password": self.server.password.get_secret_value(),
                }
            ],
            "reader": self.reader_settings(**overrides),
        }
        path.write_text(yaml.safe_dump(config))
        return path


@contextmanager
def reader_thread(
    setup: ReaderSetup, source: SourceConnection | None = None, **overrides: Any
) -> Iterator[Reader]:
    """A reader running in a thread; stopped gracefully (and its error re-raised) at exit."""
    settings = ReaderSettings(**setup.reader_settings(election=False, **overrides))
    reader = Reader(source or setup.source_connection(), settings, setup.services_for_reader())
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reader.run(stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"reader-{setup.source}", daemon=True)
    thread.start()
    try:
        yield reader
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "reader thread did not stop within 30 s"
    if errors:
        raise errors[0]


def start_reader_process(
    config: Path, source: str, reader_id: str, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`rowbus reader run` as a process of its own, its output appended to `log`; `env`: more
    environment (e.g. ``ROWBUS_READER_FAULT``, `rowbus.producer.faults`)."""
    environ = {**os.environ, **(env or {})}
    proclogs.keep(log, f"reader {reader_id}")
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-X",
                "faulthandler",  # also without the inherited PYTHONFAULTHANDLER
                "-m",
                "rowbus",
                "-v",
                "-c",
                str(config),
                "reader",
                "run",
                "--source",
                source,
                "--reader-id",
                reader_id,
            ],
            cwd=ROOT,
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


class TopicReader:
    """Reads a topic's every partition from the start with read_committed, decoding records."""

    def __init__(self, services: Settings, topic: str) -> None:
        self.topic = topic
        self._services = services
        self._open()
        self.records: list[tuple[int, int, bytes | None, Record]] = []

    def _open(self) -> None:
        services, topic = self._services, self.topic
        self.consumer = Consumer(
            services.kafka.client_config(
                **{
                    "group.id": f"test-{topic}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "receive.message.max.bytes": 200_000_000,
                }
            )
        )
        meta = self.consumer.list_topics(topic, timeout=10).topics[topic]
        self.partitions = sorted(meta.partitions)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions])

    def poll(self) -> set[int]:
        """Read what is there now; returns the partitions that reported their end."""
        at_end: set[int] = set()
        for _ in range(50):
            msgs = self.consumer.consume(5000, timeout=0.2)
            if not msgs or at_end >= set(self.partitions):
                break
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise AssertionError(f"consume error {err}")
                where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
                self.records.append(
                    (
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        decode(msg.value(), msg.headers(), where),
                    )
                )
        return at_end

    def until(
        self, condition: Callable[[list[Record]], bool], timeout: float, what: str
    ) -> list[Record]:
        reopen_at = [time.monotonic() + 15]

        def check() -> bool:
            self.poll()
            if condition([r for _, _, _, r in self.records]):
                return True
            if time.monotonic() > reopen_at[0]:
                # noida-db sometimes leaves a fetching read_committed consumer short of records
                # committed since (ENVIRONMENT.md); a fresh consumer reads them: start over.
                self.consumer.close()
                self.records.clear()
                self._open()
                reopen_at[0] = time.monotonic() + 15
            return False

        wait_for(check, timeout=timeout, what=what)
        return [r for _, _, _, r in self.records]

    def close(self) -> None:
        self.consumer.close()
