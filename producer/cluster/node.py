"""A reader cluster node (`rowbus reader node`): a member, an agent running reader tasks, and a
contender for the coordinator.

Lifecycle: construct (no I/O), `run(stop)` until `stop` is set:
- connect to ZooKeeper with a short session (`ClusterSettings.session_timeout_s`: it bounds how
  long a node killed with -9 keeps its sources) and register the ephemeral ``nodes/<id>``;
- a thread contends in the coordinator election; while it wins it runs `schedule` after every
  change it is told about (watches) and writes the plan (`rowbus.producer.cluster.scheduler`);
- the agent (the calling thread) reads the replication sets, starts a prepared-but-waiting task
  where this node is the target, grants it when the set turns Replicating here, stops a task
  (its reader commits its last batch) where this node is an owner asked to commit, and reports
  every task's phase and watermark in its znode.
A lost session stops every task at once (the coordinator gives the sources to others; Kafka's
transactional.id fences any late write) and the node registers again. `stop` stops the tasks
gracefully, each committing its open batch, and then leaves.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError

from rowbus.clients import zookeeper
from rowbus.clients.errors import ZooKeeperClientError
from rowbus.clients.settings import SourceConnection
from rowbus.producer.cluster import zk
from rowbus.producer.cluster.balance import LoadPolicy
from rowbus.producer.cluster.scheduler import schedule
from rowbus.producer.cluster.settings import ClusterSettings
from rowbus.producer.cluster.state import NodeStatus, Paths, ReplicationSet, SetState
from rowbus.producer.cluster.task import ReaderTask, TaskLease
from rowbus.producer.exceptions import SourceUnavailableError
from rowbus.producer.reader import Reader, default_reader_id
from rowbus.producer.settings import ReaderSettings, Services

log = logging.getLogger(__name__)

TICK_S = 0.02
"""How often the agent looks at its own tasks (cheap, local): a prepared task is reported
within this, which is on the failover's critical path."""
STATUS_EVERY_S = 0.5
"""Watermark-only changes of the node's znode are written at most this often."""
RESTART_BACKOFF_S = 2.0
MAX_LOOP_S = 30 * 24 * 3600.0


class ClusterNode:
    def __init__(
        self,
        sources: Mapping[str, SourceConnection],
        settings: ReaderSettings,
        services: Services,
        reader_factory: Callable[..., Reader] = Reader,
    ) -> None:
        self.cluster: ClusterSettings = settings.cluster
        self.node_id = self.cluster.node_id or settings.reader_id or default_reader_id()
        self._policy = LoadPolicy(min_gap=self.cluster.load_min_gap)
        self.sources = dict(sources)
        self.settings = settings.model_copy(update={"reader_id": self.node_id})
        self.services = services
        self.paths = Paths(services.zookeeper_root)
        self._factory = reader_factory
        self._client: Any = None
        self._wake = threading.Event()
        self._coordinator_wake = threading.Event()
        self._expired = threading.Event()
        self.tasks: dict[str, ReaderTask] = {}
        self._released: dict[str, int] = {}
        self._failed_at: dict[str, float] = {}
        self._written: NodeStatus | None = None
        self._written_at = 0.0
        self._generation = 0
        self._leaving = False
        self._election: Any = None

    # ---- ZooKeeper session ----------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: only flags here, never a blocking call. A SUSPENDED
        # connection (seen on a busy machine: a ping answered late) does not stop the tasks:
        # if the session does expire, the coordinator gives the sources to other nodes whose
        # readers fence these through the sources' Kafka transactional.ids, and nothing is
        # published twice; ending every term on each hiccup cost a takeover per source.
        if state == KazooState.LOST:
            self._generation += 1
            for task in list(self.tasks.values()):
                task.lease.session_lost()
            if not self._leaving:
                log.warning("node %s lost its ZooKeeper session: stopping its tasks", self.node_id)
            self._expired.set()
        self._wake.set()
        self._coordinator_wake.set()

    def _connected(self) -> bool:
        return self._client is not None and self._client.state == KazooState.CONNECTED

    def _on_sets(self, _event: object) -> None:
        self._wake.set()

    def _on_cluster(self, _event: object) -> None:
        self._coordinator_wake.set()

    def _register(self, stop: threading.Event) -> None:
        """Create this node's ephemeral znode; a previous session of the same id (a node
        restarted at once after kill -9) holds it until ZooKeeper expires that session. A
        connection lost meanwhile (ConnectionLoss while a new session settles after an
        expiry: a node exited with status 2 on it in the nemesis) is waited out, not fatal."""
        deadline = time.monotonic() + 4 * self.cluster.session_timeout_s + 30
        while not stop.is_set():
            try:
                zk.ensure_paths(self._client, self.paths)
                zk.remove(self._client, self.paths.drain(self.node_id))
                with zookeeper.zk_errors(f"registering node {self.node_id}"):
                    self._client.create(
                        self.paths.node(self.node_id), self._status().encode(), ephemeral=True
                    )
                log.info("node %s registered at %s", self.node_id, self.paths.node(self.node_id))
                return
            except ZooKeeperClientError as exc:
                held = isinstance(exc.__cause__, NodeExistsError)
                if not (held or exc.retryable) or time.monotonic() > deadline:
                    raise
                if not held:
                    log.warning("node %s: %s; registering when it answers", self.node_id, exc)
                stop.wait(0.2)

    # ---- run ------------------------------------------------------------------------------------

    def _connect(self, stop: threading.Event) -> None:
        """Start the ZooKeeper client. ZooKeeper unreachable at start (a node restarted while
        its network to ZooKeeper is cut or slower than the session timeout: it exited with
        status 2 after 5 s in the nemesis) is waited out within the registration's deadline,
        one attempt at a time so a stop is heard between them; only then is it fatal."""
        deadline = time.monotonic() + 4 * self.cluster.session_timeout_s + 30
        while True:
            try:
                self._client = zookeeper.start_client(
                    self.services.zookeeper_hosts or "",
                    self.cluster.session_timeout_s,
                    listener=self._on_state,
                    auth=self.services.zookeeper_auth,
                )
                return
            except ZooKeeperClientError as exc:
                if not exc.retryable or stop.is_set() or time.monotonic() > deadline:
                    raise SourceUnavailableError(f"ZooKeeper unreachable: {exc}") from exc
                log.warning("node %s: %s; connecting again", self.node_id, exc)
                stop.wait(0.5)

    def run(self, stop: threading.Event) -> None:
        self._connect(stop)
        coordinator = threading.Thread(
            target=self._contend, args=(stop,), name="coordinator", daemon=True
        )
        try:
            self._register(stop)
            coordinator.start()
            self._agent(stop)
        finally:
            stop.set()
            self._leaving = True
            self._coordinator_wake.set()
            self._stop_tasks()
            election = self._election
            if election is not None:
                election.cancel()  # a contender blocked in the election wakes up
            coordinator.join(10)
            zookeeper.stop_client(self._client)
            log.warning("node %s left the cluster", self.node_id)

    def _agent(self, stop: threading.Event) -> None:
        sets: dict[str, ReplicationSet] = {}
        next_read = 0.0
        until = time.monotonic() + MAX_LOOP_S
        while not stop.is_set() and time.monotonic() < until:
            if self._expired.is_set():
                self._recover(stop)
                next_read = 0.0
            woken = self._wake.wait(TICK_S)
            now = time.monotonic()
            if woken or now >= next_read:
                self._wake.clear()
                try:
                    sets = zk.read_sets(self._client, self.paths, self._on_sets)
                except ZooKeeperClientError as exc:
                    log.warning("node %s: %s", self.node_id, exc)
                    stop.wait(0.2)
                    continue
                next_read = now + self.cluster.resync_s
            self._reconcile(sets)
            self._report()

    def _recover(self, stop: threading.Event) -> None:
        """After a lost session: stop every task without waiting for their commits (they may
        already be fenced), wait for the new session and register again."""
        for task in self.tasks.values():
            task.lease.session_lost()
            task.stop()
        self._reap(wait_s=10.0)
        self._expired.clear()
        self._written = None
        while not stop.is_set() and not self._connected():
            stop.wait(0.1)
        if not stop.is_set():
            self._register(stop)

    # ---- tasks ----------------------------------------------------------------------------------

    def _desired(self, sets: Mapping[str, ReplicationSet]) -> dict[str, bool]:
        """Sources this node must run a task for, and whether that task may publish."""
        desired: dict[str, bool] = {}
        me = self.node_id
        for s in sets.values():
            if s.owner == me and s.state in (SetState.REPLICATING, SetState.PREPARE):
                desired[s.source] = True
            elif s.target == me and s.state in (SetState.PREPARE, SetState.COMMIT):
                desired[s.source] = False
        return desired

    def _reconcile(self, sets: Mapping[str, ReplicationSet]) -> None:
        self._reap()
        desired = self._desired(sets)
        for source, task in self.tasks.items():
            if source not in desired:
                if not task.stopping:
                    log.info("node %s stops %s (commits its last batch)", self.node_id, source)
                    task.stop()
            elif desired[source] and not task.stopping:
                task.lease.grant()
        now = time.monotonic()
        for source, granted in desired.items():
            if source in self.tasks or now - self._failed_at.get(source, -1e9) < RESTART_BACKOFF_S:
                continue
            connection = self.sources.get(source)
            if connection is None:
                log.error("node %s: source %s is not in its configuration", self.node_id, source)
                self._failed_at[source] = now
                continue
            lease = TaskLease(self._connected)
            if granted:
                lease.grant()
            reader = self._factory(connection, self.settings, self.services, leadership=lease)
            log.info("node %s starts a task for %s (granted=%s)", self.node_id, source, granted)
            self.tasks[source] = ReaderTask(reader, lease, self.cluster.load_window_s).start()

    def _reap(self, wait_s: float = 0.0) -> None:
        for source, task in list(self.tasks.items()):
            if wait_s:
                task.join(wait_s)
            if task.alive():
                continue
            del self.tasks[source]
            self._released[source] = task.reader.metrics.watermark_ts
            if task.error is not None:
                self._failed_at[source] = time.monotonic()
            log.info("node %s released %s", self.node_id, source)

    def _stop_tasks(self) -> None:
        for task in self.tasks.values():
            task.stop()
        self._reap(wait_s=30.0)

    # ---- status ---------------------------------------------------------------------------------

    def _status(self) -> NodeStatus:
        tasks = {source: task.status() for source, task in self.tasks.items()}
        return NodeStatus(self.node_id, tasks, dict(self._released))

    def _report(self) -> None:
        status = self._status()
        written = self._written
        if status == written:
            return
        now = time.monotonic()
        phases_changed = (
            written is None
            or {s: t.phase for s, t in status.tasks.items()}
            != {s: t.phase for s, t in written.tasks.items()}
            or status.released != written.released
        )
        if not phases_changed and now - self._written_at < STATUS_EVERY_S:
            return
        try:
            with zookeeper.zk_errors(f"reporting node {self.node_id}"):
                self._client.set(self.paths.node(self.node_id), status.encode())
        except ZooKeeperClientError as exc:
            log.debug("node %s: %s", self.node_id, exc)
            return
        self._written, self._written_at = status, now

    # ---- coordinator ----------------------------------------------------------------------------

    def _contend(self, stop: threading.Event) -> None:
        until = time.monotonic() + MAX_LOOP_S
        while not stop.is_set() and time.monotonic() < until:
            if not self._connected():
                stop.wait(0.1)
                continue
            election = self._client.Election(self.paths.coordinator, self.node_id)
            self._election = election
            try:
                election.run(self._coordinate, stop)
            except Exception as exc:  # noqa: BLE001 - kazoo errors; contend again
                log.warning("node %s: coordinator election: %s", self.node_id, exc)
                stop.wait(0.2)
            finally:
                election.cancel()

    def _coordinate(self, stop: threading.Event) -> None:
        log.warning("node %s is the coordinator", self.node_id)
        sources = list(self.sources)
        generation = self._generation
        until = time.monotonic() + MAX_LOOP_S
        while not stop.is_set() and time.monotonic() < until:
            if self._generation != generation:
                # The session expired: so did the election's lock node; contend again.
                log.warning("node %s: session lost, no longer coordinating", self.node_id)
                return
            self._coordinator_wake.clear()
            try:
                view = zk.read_view(self._client, self.paths, self._on_cluster)
                plan = schedule(sources, view, self.cluster.balance, self._policy)
                if plan:
                    for source, rset in plan.write.items():
                        log.info(
                            "coordinator: %s %s owner=%s target=%s",
                            source,
                            rset.state.value,
                            rset.owner,
                            rset.target,
                        )
                    zk.apply_plan(self._client, self.paths, plan)
                    continue  # take the next step at once
            except ZooKeeperClientError as exc:
                log.warning("coordinator %s: %s", self.node_id, exc)
                stop.wait(0.2)
            self._coordinator_wake.wait(self.cluster.resync_s)
