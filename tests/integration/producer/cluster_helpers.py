"""A reader cluster for tests and the benchmark: N sources over the two source servers (one
database each, `include_schemas` per source), node processes, a paced workload per source, and
the checks: per source, exactly the committed transactions in Kafka (read_committed), and
checkpoints that never move back."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import AdminClient

from rowbus.config import MySQLSettings, Settings
from rowbus.producer.cluster import admin
from rowbus.producer.cluster.scheduler import schedule
from rowbus.producer.cluster.state import ClusterView, Paths, SetState
from rowbus.protocol.events import Op, ReaderCheckpoint, RowChange
from rowbus.waiting import wait_for
from tests import proclogs
from tests.conftest import connect
from tests.integration.producer.helpers import ROOT, TopicReader
from tests.integration.producer.workload import Workload

SESSION_TIMEOUT_S = 1.5


@dataclass
class Source:
    name: str
    server: MySQLSettings
    database: str
    workload: Workload | None = None


@dataclass
class Cluster:
    services: Settings
    workdir: Path
    sources: list[Source]
    root: str
    topic_prefix: str
    checkpoints_topic: str
    schemas_topic: str
    config: Path = field(init=False)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _zk: Any = None
    paths: Paths = field(init=False)

    def __post_init__(self) -> None:
        self.paths = Paths(self.root)
        self.config = self.workdir / "rowbus.yaml"
        self.config.write_text(yaml.safe_dump(self._config()))

    def _config(self) -> dict[str, Any]:
        return {
            "kafka": {"bootstrap_servers": self.services.kafka.bootstrap_servers},
            "zookeeper": {"hosts": self.services.zookeeper.hosts, "root": self.root},
            "sources": [
                {
                    "name": s.name,
                    "host": s.server.host,
                    "port": s.server.port,
                    "user": s.server.user,
                    "password": s.server.password.get_secret_value(),
                    "include_schemas": [s.database],
                }
                for s in self.sources
            ],
            "reader": {
                "start": "latest",
                "topic_template": self.topic_prefix + "{source}",
                "checkpoints_topic": self.checkpoints_topic,
                "schemas_topic": self.schemas_topic,
                "partitions": 2,
                "flush_interval_s": 0.05,
                "cluster": {"session_timeout_s": SESSION_TIMEOUT_S},
            },
        }

    # ---- processes ------------------------------------------------------------------------------

    def log(self, node: str) -> Path:
        return self.workdir / f"{node}.log"

    def start(self, node: str) -> None:
        proclogs.keep(self.log(node), f"reader node {node}")
        with self.log(node).open("ab") as out:
            self.procs[node] = subprocess.Popen(
                [
                    sys.executable,
                    "-X",
                    "faulthandler",
                    "-m",
                    "rowbus",
                    "-v",
                    "-c",
                    str(self.config),
                    "reader",
                    "node",
                    "--node-id",
                    node,
                    "--metrics-port",
                    "0",
                ],
                cwd=ROOT,
                env=dict(os.environ),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self, node: str) -> float:
        proc = self.procs.pop(node)
        proc.send_signal(signal.SIGKILL)
        killed = time.time()
        proc.wait(10)
        return killed

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for node, proc in list(self.procs.items()):
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            del self.procs[node]

    # ---- ZooKeeper ------------------------------------------------------------------------------

    @property
    def zk(self) -> Any:
        if self._zk is None:
            from rowbus.clients import zookeeper

            self._zk = zookeeper.start_client(self.services.zookeeper.hosts or "", 10.0)
        return self._zk

    def view(self) -> ClusterView:
        return admin.view(self.zk, self.paths)

    def coordinator(self) -> str:
        contenders = self.zk.Election(self.paths.coordinator).contenders()
        return str(contenders[0])

    def stable(self, nodes: set[str]) -> ClusterView | None:
        """Every source Replicating on one of `nodes` and published, and nothing left for the
        coordinator to do (balanced as far as operators' placements allow)."""
        v = self.view()
        if set(v.nodes) != nodes or set(v.sets) != {s.name for s in self.sources}:
            return None
        for s in v.sets.values():
            if s.state is not SetState.REPLICATING or s.owner not in nodes:
                return None
            task = v.nodes[s.owner].tasks.get(s.source)
            if task is None or task.ts <= 0 or task.ts < s.floor_ts:
                return None
        return None if schedule([s.name for s in self.sources], v) else v

    def wait_stable(self, nodes: set[str], timeout: float = 60) -> ClusterView:
        return wait_for(
            lambda: self.stable(nodes), timeout=timeout, what=f"sources balanced over {nodes}"
        )

    def metrics_port(self, node: str) -> int | None:
        """The port `node`'s running process serves metrics on (the last one its log names)."""
        pattern = re.compile(
            rf"reader node {re.escape(node)} metrics on http://127\.0\.0\.1:(\d+)/"
        )
        found = pattern.findall(self.log(node).read_text(errors="replace"))
        return int(found[-1]) if found else None

    def took_over(self, node: str, source: str, after: float) -> float | None:
        """When `node` first published `source` (its log) after `after` (epoch seconds)."""
        pattern = re.compile(rf"\b{re.escape(node)} took over {re.escape(source)} ")
        for line in self.log(node).read_text(errors="replace").splitlines():
            if pattern.search(line):
                stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if stamp >= after:
                    return stamp
        return None

    def close(self) -> None:
        self.stop_all()
        if self._zk is not None:
            from rowbus.clients import zookeeper

            zookeeper.stop_client(self._zk)
            self._zk = None

    # ---- workloads ------------------------------------------------------------------------------

    def start_workloads(self, pace_s: float, seed: int = 1) -> None:
        for i, s in enumerate(self.sources):
            s.workload = Workload(
                s.server, s.database, count=1_000_000, seed=seed + i, pace_s=pace_s
            )
            s.workload.start()

    def stop_workloads(self) -> None:
        for s in self.sources:
            if s.workload is not None:
                s.workload.stop.set()
        for s in self.sources:
            if s.workload is not None:
                s.workload.join(60)
                assert s.workload.error is None, s.workload.error

    # ---- checks ---------------------------------------------------------------------------------

    def checkpoints(self) -> dict[str, list[ReaderCheckpoint]]:
        reader = read_all(self.services, self.checkpoints_topic)
        try:
            out: dict[str, list[ReaderCheckpoint]] = {}
            for _, _, key, r in sorted(reader.records, key=lambda x: (x[0], x[1])):
                if isinstance(r, ReaderCheckpoint) and key == r.source.encode():
                    out.setdefault(r.source, []).append(r)
            return out
        finally:
            reader.close()

    def caught_up(self) -> bool:
        history = self.checkpoints()
        behind = []
        for s in self.sources:
            assert s.workload is not None
            written = s.workload.written.transactions
            last = list(written)[-1] if written else None
            mine = history.get(s.name)
            at = mine[-1].position.gtid if mine else None
            # Sources share servers: the checkpoint may stand past other sources' transactions.
            if last is not None and (at is None or _seq(at) < _seq(last)):
                behind.append(f"{s.name} at {at} of {last}")
        if behind:
            raise AssertionError("behind: " + ", ".join(behind))
        return True

    def verify(self) -> dict[str, int]:
        """Per source, the rows in Kafka equal the committed transactions (no loss, no
        duplicate), and its checkpoints never move back; returns rows per source."""
        wait_for(self.caught_up, timeout=90, what="every source's last transaction checkpointed")
        for source, history in self.checkpoints().items():
            keys = [(c.position.file, c.position.offset) for c in history]
            assert keys == sorted(keys), f"{source}: a checkpoint position moved back"
            ts = [c.ts for c in history]
            assert ts == sorted(ts), f"{source}: a checkpoint ts moved back"
        counts = {}
        for s in self.sources:
            assert s.workload is not None
            data = read_all(self.services, self.topic_prefix + s.name)
            rows = [r for _, _, _, r in data.records if isinstance(r, RowChange)]
            data.close()
            keys = [(r.txn.id, r.txn.index) for r in rows]
            assert len(keys) == len(set(keys)), f"{s.name}: a row change was delivered twice"
            got: dict[str, list[tuple[Op, int, int | None]]] = {}
            for row in sorted(rows, key=lambda r: (r.ts, r.txn.index)):
                got.setdefault(row.txn.id, []).append(
                    (row.op, row.image[0], row.after[1] if row.after else None)  # type: ignore[misc]
                )
            expected = s.workload.written.transactions
            missing = set(expected) - set(got)
            extra = set(got) - set(expected)
            assert not missing and not extra, f"{s.name}: {len(missing)} lost, {len(extra)} extra"
            assert got == expected, f"{s.name}: rows differ from the source"
            counts[s.name] = len(rows)
        return counts


def _seq(gtid: str) -> int:
    """The sequence number of a MariaDB GTID (domain-server-seq)."""
    return int(gtid.rsplit("-", 1)[1])


def read_all(services: Settings, topic: str, timeout: float = 60) -> TopicReader:
    """A fresh read_committed reader that has read `topic` up to the end of every partition."""
    reader = TopicReader(services, topic)
    ended: set[int] = set()

    def at_end() -> bool:
        ended.update(reader.poll())
        return ended >= set(reader.partitions)

    try:
        wait_for(at_end, timeout=timeout, what=f"the end of {topic}")
    except BaseException:
        reader.close()
        raise
    return reader


@contextmanager
def cluster_of(
    services: Settings, workdir: Path, sources: int, tag: str | None = None
) -> Iterator[Cluster]:
    """`sources` sources spread over the two servers, fresh databases and topics; dropped and
    deleted at exit."""
    tag = tag or uuid.uuid4().hex[:8]
    made: list[Source] = []
    for i in range(sources):
        server = services.sources[i % len(services.sources)]
        database = f"cl_{tag}_{i}"
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}`")
        Workload.create(server, database)
        made.append(Source(f"cl{tag}s{i}", server, database))
    cluster = Cluster(
        services,
        workdir,
        made,
        root=f"/rowbus-test-{tag}",
        topic_prefix=f"test.cl.{tag}.",
        checkpoints_topic=f"test.cl.{tag}.checkpoints",
        schemas_topic=f"test.cl.{tag}.schemas",
    )
    try:
        yield cluster
    finally:
        for s in made:
            if s.workload is not None:
                s.workload.stop.set()
        cluster.close()
        for s in made:
            with connect(s.server) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{s.database}`")
        admin_client = AdminClient(services.kafka.client_config())
        topics = [
            t
            for t in admin_client.list_topics(timeout=10).topics
            if t.startswith(f"test.cl.{tag}.")
        ]
        if topics:
            for future in admin_client.delete_topics(topics, operation_timeout=10).values():
                with suppress(Exception):
                    future.result(15)
