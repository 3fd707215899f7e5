"""The nemesis: a seeded run that breaks the services and the network around rowbus while a
workload runs, then checks that the sink equals the sources.

    ROWBUS_TEST_PORT_OFFSET=600 python -m benchmarks.nemesis --seconds 600 --seed 1

The pipeline, on a private embedded stack (the tests' ports of the same offset, shifted by
``--port-shift``; state under ``.rowbus-test-nemesis-<offset>/``, kept for its logs):

- two source MariaDBs, each written by a W2-like load (`rowbus.workloads.W2`: single-row
  inserts, updates, deletes over 8 tables) plus, every tenth step, one transaction over three
  tables (an insert, an update and a delete), and a lag probe row every ~0.1 s;
- per source two readers (``rowbus reader run``, a leader and a standby elected in ZooKeeper),
  each reaching its source through a loopback proxy (`tests.faults.proxy`);
- two more sources (`CLUSTER_SOURCES`, each a database of its own on source2's and source1's
  server, at a quarter of the rate each) served by a reader cluster of two nodes (``rowbus
  reader node``), one source on each, one node also the coordinator;
- the broker (noida-db) and ZooKeeper of the embedded stack, ZooKeeper reached by every rowbus
  process through a proxy;
- the Spark apply job (``rowbus apply``), reaching the sink through a proxy.
- a Subscriber: ``rowbus tail`` of source1's topic with a checkpoint file, its JSON lines in
  ``logs/subscriber.jsonl``; at the end every probe row committed on source1 must be in it,
  first printed in commit order, repeated only after a restart (at least once). It spills past
  SUBSCRIBER_MEMORY buffered events, into ``spill/``.

The nemesis is also the operator: a rowbus process that exits is started again at once (as a
supervisor with ``Restart=always`` would; after a kill -9 fault, once the fault's time is over),
and the rest of its process group is killed first, as a supervisor's control group would be.
An exit it did not cause is reported as a crash.

Faults (drawn by the seed; one per equal slot of the run, so one at a time, each bounded by
half its slot and ten seconds, but lag-zookeeper, which adds 8 s past the session timeout to
half its length and may reach into the next slot): kill -9 and SIGSTOP/SIGCONT of a reader (the
source's leader or its standby), of the apply job's driver, of the broker and of ZooKeeper; a
clean restart of the broker; the sink's connections cut, stalled or slowed (LAG_S added to each
piece each way) at the proxy; a source's connections cut or slowed at its proxy; a clean
restart of the sink or of a source MariaDB (its own SHUTDOWN, started again after the fault;
the source's load pauses for it, as an application drains before a planned restart); kill -9 of
the Subscriber; ZooKeeper's connections cut, or slowed by LAG_S and then by more than the
readers' session timeout for longer than it (every session expires: a leader must stop
publishing before its successor takes over); kill -9 of a cluster node or of the node holding
the coordinator role; the Subscriber's spill folder full (its RLIMIT_FSIZE) while source1
commits a transaction it must spill (it stops with one line and is restarted, or waits; it
loses nothing); a source server failing over to its replica (`benchmarks.failover`: with the
kind drawn, each source server has a MariaDB replica the readers list in their ``replicas``
setting; the server's load drains, the replica catches up, the primary is shut down, the
replica promoted and written to; the heal makes the old primary the new one's replica, so the
next failover of that server goes back); kill -9 of a Spark worker with its executor (with the
kind drawn, the apply job runs on a standalone cluster of SPARK_WORKERS one-core workers from
the installed pyspark, `rowbus.testing.spark_cluster`; the heal starts the worker again). A
network fault of a source cuts or slows its replica's proxy too. The default count is one
per 16 s of load (37 in 600 s).
``--kinds K1,K2`` draws from those kinds only, ``--without K1,K2`` leaves kinds out (the test
broker loses acknowledged records when it restarts, so a run that must end equal leaves out
kill-broker, stop-broker and restart-broker); the summary names the kinds drawn from.

Recovery of a fault: from its end (the heal) to the moment the sink shows a probe row committed
on each source after the heal. Leases: the summary counts the leaders that stopped on a lost
ZooKeeper session and the terms the broker fenced, and fails the run when a source's committed
checkpoints go back in epoch (a deposed leader wrote after its successor took over). Lag:
commit-to-visible of every probe, faults included.

At the end: the load stops, everything heals, the run waits (a deadline) until the sink equals
the sources, runs ``rowbus verify --json`` (the real CLI), stops the processes with SIGTERM and
prints one summary. Exit 1 when verify finds a difference or any rowbus process exited without
the nemesis causing it (or did not stop on SIGTERM). When verify finds a difference, the
summary also names the data partitions where the broker hides committed records from the job
(`hidden_records`: nothing read read_committed from the job's offsets, records read
read_uncommitted), so the test broker's fault is told from rowbus's. ``--faults 0`` runs the
same pipeline without faults: the baseline of the lag. Figures of the first seeds:
docs/operations.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import yaml

from benchmarks.failover import Pairs, quiet_sources
from rowbus.clients import mysql
from rowbus.config import MySQLSettings, Settings, load_settings
from rowbus.local.procs import ProcessRecord, gone, started_at
from rowbus.local.stack import LocalStack
from rowbus.testing.spark_cluster import PORT_BASE, SparkCluster
from rowbus.verify import verify
from rowbus.waiting import wait_for
from rowbus.workloads import W2

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("source1", "source2")
"""The sources read by a leader and a standby each (`rowbus reader run`)."""
CLUSTER_SOURCES = ("source3", "source4")
"""The sources the reader cluster serves (the balancer puts one on each node, so a node killed
always has a source to hand over): databases of their own on source2's and source1's servers,
reached through those servers' proxies (so their network and restart faults reach them too)."""
SERVER_OF = {"source1": "source1", "source2": "source2", "source3": "source2", "source4": "source1"}
"""Which stack server holds each source's database."""
ALL_SOURCES = (*SOURCES, *CLUSTER_SOURCES)
NODES = ("node-1", "node-2")
"""The reader cluster's nodes (`rowbus reader node`); one holds the coordinator role."""
READERS = ("a", "b")
PARTITIONS = 4
TEST_PORTS = {"kafka": 29092, "zookeeper": 22181, "source1": 23306, "source2": 23307, "sink": 23308}
KINDS = (
    "kill-reader",
    "stop-reader",
    "kill-apply",
    "stop-apply",
    "kill-broker",
    "stop-broker",
    "restart-broker",
    "kill-zookeeper",
    "stop-zookeeper",
    "cut-sink",
    "stall-sink",
    "cut-source",
    # Added after the first seeds' figures: last, so ``--kinds`` naming the twelve above draws
    # the plans those seeds drew.
    "lag-sink",
    "lag-source",
    "restart-sink",
    "restart-source",
    "kill-subscriber",
    # ZooKeeper behind a proxy (every rowbus process reaches it through one).
    "cut-zookeeper",
    "lag-zookeeper",
    # The reader cluster beside the leader/standby readers.
    "kill-cluster-node",
    "kill-coordinator",
    "full-spill-disk",
    # A source's server failing over to its replica; the apply job on a standalone cluster.
    "failover-source",
    "kill-spark-worker",
)
SOURCE_KINDS = (
    "kill-reader",
    "stop-reader",
    "cut-source",
    "lag-source",
    "restart-source",
    "failover-source",
)
"""The kinds whose fault concerns one source (drawn as the fault's target)."""
LAG_S = 0.25
"""What a lag fault adds to each piece a proxy passes on, each way."""
PAST_SESSION_S = 2.0
"""lag-zookeeper's second part: the readers' session timeout plus this, both as the lag and
as how long it lasts, so ZooKeeper expires every session held through the proxy."""
SUBSCRIBER_MEMORY = 1000
"""The Subscriber's ``memory_limit_events``: a transaction of BULK_ROWS rows spills."""
BULK_ROWS = 3000
"""full-spill-disk writes one transaction of this many rows on source1 (past the Subscriber's
memory limit, so it must spill) while its spill files may not grow past SPILL_FILE_LIMIT."""
SPILL_FILE_LIMIT = 64 << 10
"""full-spill-disk: the Subscriber's RLIMIT_FSIZE (bytes), well under what BULK_ROWS rows
spill and well over its checkpoint file (its output and log go through pipes)."""
ROWBUS_CLI = (sys.executable, "-m", "rowbus")
MAX_FAULT_S = 10.0
SPARK_WORKERS = 2
"""kill-spark-worker: the apply job runs on a standalone cluster of this many one-core workers
(the other keeps the job going while one is down)."""
GROUP_GRACE_S = 45.0
"""How long what a dead process leaves (a job stopping after its runner died) may take to end
before the restart kills it and reports it."""

# The loopback proxy of the fault tests, imported by name (tests/ is not a typed package).
Proxy = Any


def _proxy_class() -> Any:
    return importlib.import_module("tests.faults.proxy").Proxy


# ---- the plan (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float
    """Seconds after the load started."""
    kind: str
    duration: float
    target: str
    """The source a reader or network fault concerns ("" for the others)."""
    leader: bool = True
    """For reader faults: the source's leader (else its standby); for apply faults: the job's
    driver (else the ``rowbus apply`` process that runs it)."""


def choose_kinds(only: str | None = None, without: str | None = None) -> tuple[str, ...]:
    """The fault kinds a run draws from: `only` (comma-separated; default every kind) less
    `without`, in KINDS's order (so the default draws exactly as before). A name that is not a
    kind, or a choice that leaves none, is refused in one line."""
    chosen = set(KINDS)
    for option, value in (("--kinds", only), ("--without", without)):
        if value is None:
            continue
        names = {n.strip() for n in value.split(",") if n.strip()}
        if unknown := sorted(names - set(KINDS)):
            raise ValueError(
                f"{option}: unknown fault kind {', '.join(unknown)}; the kinds: {', '.join(KINDS)}"
            )
        chosen = chosen & names if option == "--kinds" else chosen - names
    if not chosen:
        raise ValueError("--kinds/--without: no fault kind left to draw; name at least one")
    return tuple(k for k in KINDS if k in chosen)


def plan(
    seed: int,
    seconds: float,
    count: int,
    warmup: float = 10.0,
    kinds: tuple[str, ...] = KINDS,
) -> list[Fault]:
    """`count` faults at seeded moments, one per equal slot of ``[warmup, seconds)``, each of
    a kind drawn from `kinds`; each starts in the first quarter of its slot and lasts at most
    half of it, so one fault at a time and every fault healed before the next."""
    rng = random.Random(seed)
    if count <= 0:
        return []
    slot = (seconds - warmup) / count
    faults = []
    for i in range(count):
        kind = rng.choice(kinds)
        at = warmup + i * slot + rng.uniform(0, slot / 4)
        duration = min(rng.uniform(1.0, MAX_FAULT_S), slot / 2)
        target = rng.choice(SOURCES) if kind in SOURCE_KINDS else ""
        faults.append(Fault(at, kind, round(duration, 2), target, rng.random() < 0.7))
    return faults


def kinds_line(kinds: tuple[str, ...]) -> str:
    """The kinds a run draws from, for its summary: the shorter of what is in and what is out."""
    left = [k for k in KINDS if k not in kinds]
    if len(left) < len(kinds):
        return f"all {len(KINDS)} but " + ", ".join(left) if left else f"all {len(KINDS)}"
    return f"{len(kinds)} of {len(KINDS)}: " + ", ".join(kinds)


def refusals_lines(refusals: list[str]) -> list[str]:
    """The refusals for the summary, those of one process that differ only in paths and
    numbers as one line: the first, and how many more."""
    groups: dict[tuple[str, str], list[str]] = {}
    for line in refusals:
        name, _, said = line.partition(": ")
        shape = re.sub(r"/\S*|\d[\d,]*", "#", said)
        groups.setdefault((name.split(" (pid", 1)[0], shape), []).append(line)
    return [
        first + (f" (and {len(more)} more like it)" if more else "")
        for first, *more in groups.values()
    ]


def sources_on(server: str) -> list[str]:
    """The sources whose database lives on stack server `server` (a restart or a failover of
    the server pauses the load of each)."""
    return [s for s in ALL_SOURCES if SERVER_OF[s] == server]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


# ---- processes: the supervised rowbus processes and the stack's services -----------------------


def _group(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in {"Z", "X"}:
            found.append(int(stat.parent.name))
    return found


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _describe(code: int) -> str:
    if code < 0:
        return f"signal {-code} ({signal.Signals(-code).name})"
    return f"status {code}"


def _limit_files(pid: int, limit: int | None) -> None:
    """Set (or, with None, lift) the file-size limit of process `pid`: a write past `limit`
    bytes of any file fails with EFBIG, as on a full disk (Python ignores SIGXFSZ)."""
    soft = resource.RLIM_INFINITY if limit is None else limit
    with contextlib.suppress(ProcessLookupError):
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, resource.RLIM_INFINITY))


def _copy(pipe: Any, path: Path) -> None:
    """Append what comes through `pipe` to `path` until the writer closes it."""
    with pipe, path.open("ab") as out:
        while chunk := pipe.read1(65536):
            out.write(chunk)
            out.flush()


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text[-lines:])


@dataclass
class Supervised:
    """A rowbus process the nemesis runs (in a session of its own) and restarts."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str]
    out: Path | None = None
    """Where its stdout goes (else into its log with stderr)."""
    dies_on_term: bool = False
    """SIGTERM ends it by the signal's default action (`rowbus tail` has no handler: its
    checkpoint is saved only after what it covers is printed, so that is a clean stop; SIGINT
    would not do, a background job's children ignore it)."""
    popen: subprocess.Popen[bytes] | None = None
    killed: bool = False
    """The nemesis sent it SIGKILL: its exit is expected."""
    held: bool = False
    """Kept down by a fault: not restarted until the fault ends."""
    groups: set[int] = field(default_factory=set)
    """The process groups it leads or its children lead (``rowbus apply`` runs its job as a
    group of its own), remembered while it runs: once it is dead they cannot be found."""

    relay: bool = False
    """Its stdout and stderr reach their files through pipes the nemesis copies: a file-size
    limit on the process (full-spill-disk) then bites only the files it writes itself."""
    file_limit: int | None = None
    """RLIMIT_FSIZE (bytes) a start gets while a full-spill-disk fault lasts."""
    relays: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        with self.log.open("ab") as log, (self.out or self.log).open("ab") as out:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.relay else out if self.out else log,
                stderr=subprocess.PIPE if self.relay else log,
                start_new_session=True,
                env={**os.environ, **self.env},
            )
        if (limit := self.file_limit) is not None:
            # At once, long before it has read enough to spill.
            _limit_files(self.popen.pid, limit)
        self.killed = False
        if self.relay:
            assert self.popen.stdout is not None
            assert self.popen.stderr is not None
            self.relays = [
                threading.Thread(target=_copy, args=(pipe, path), daemon=True)
                for pipe, path in (
                    (self.popen.stdout, self.out or self.log),
                    (self.popen.stderr, self.log),
                )
            ]
            for thread in self.relays:
                thread.start()

    def drained(self) -> None:
        """After its exit: what it wrote is in its files (its last line, for the verdict)."""
        for thread in self.relays:
            thread.join(10)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.popen is not None and self.popen.poll() is None:
            if sig == signal.SIGKILL:
                self.killed = True
            os.kill(self.popen.pid, sig)


@dataclass
class Supervisor:
    """Restarts what exits, and records every exit the nemesis did not cause."""

    procs: dict[str, Supervised] = field(default_factory=dict)
    crashes: list[str] = field(default_factory=list)
    restarts: Counter[str] = field(default_factory=Counter)
    leftovers: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """Documented refusals caused by a fault, not crashes: the apply job stopping (exit 2,
    CheckpointConflictError) because the broker, killed with -9, came back without records it
    had acknowledged (noida-db loses its last second of writes; see notes/ENVIRONMENT.md); the
    job stopping (exit 2, LogChangedError) after any broker restart, clean or not, which lost
    records the job had read and reused their offsets (docs/operations.md, "A broker that loses
    records")."""
    broker_killed: bool = False
    broker_restarted: bool = False
    spill_limited: bool = False
    """A full-spill-disk fault happened: the Subscriber's stop with SpillFullError is its
    documented answer, not a crash."""

    def add(self, proc: Supervised) -> None:
        self.procs[proc.name] = proc
        proc.start()

    def poll(self) -> None:
        for proc in self.procs.values():
            if proc.popen is None or proc.held:
                continue
            code = proc.popen.poll()
            if code is None:
                proc.groups |= {proc.pid, *_children(proc.pid)}
                continue
            proc.drained()
            if not proc.killed and self._refused(proc, code):
                self.refusals.append(f"{proc.name} (pid {proc.pid}): {_tail(proc.log, 1)}")
            elif not proc.killed:
                self.crashes.append(
                    f"{proc.name} (pid {proc.pid}) exited with {_describe(code)}; "
                    f"{proc.log}: {_tail(proc.log)}"
                )
            self.clear_group(proc)
            proc.start()
            self.restarts[proc.name] += 1

    def _refused(self, proc: Supervised, code: int) -> bool:
        last = _tail(proc.log, 1) if code == 2 else ""
        if self.spill_limited and last.startswith("rowbus: error: spill folder "):
            return True  # the Subscriber's one line for a full spill disk
        return (self.broker_killed and "apply stopped: CheckpointConflictError" in last) or (
            (self.broker_killed or self.broker_restarted)
            and "apply stopped: LogChangedError" in last
        )

    def clear_group(self, proc: Supervised) -> None:
        """What the dead process left in its group (the apply driver's JVM and workers) is
        given GROUP_GRACE_S to exit by itself, then killed, as a supervisor's cgroup would."""
        groups = proc.groups | {proc.pid}
        proc.groups = set()

        def left() -> list[int]:
            return [pid for pgid in groups for pid in _group(pgid)]

        try:
            wait_for(lambda: not left(), timeout=GROUP_GRACE_S, what=f"{proc.name}'s groups")
        except Exception:  # noqa: BLE001 - a timeout is the finding, recorded below
            self.leftovers.append(
                f"{proc.name} (pid {proc.pid}): {len(left())} process(es) of its groups alive "
                f"{GROUP_GRACE_S:.0f} s after it ended"
            )
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            wait_for(lambda: not left(), timeout=10, what=f"{proc.name}'s groups to die")

    def kill(self, name: str, child: bool = False) -> int:
        """SIGKILL the process (or, with `child`, the process it runs: the apply job's driver,
        whose runner then exits by itself); return the pid killed."""
        proc = self.procs[name]
        self.poll()
        proc.held = True
        assert proc.popen is not None
        victims = _children(proc.pid) if child else []
        if victims:
            proc.killed = True  # its runner's exit follows from this kill
            os.kill(victims[0], signal.SIGKILL)
        else:
            proc.signal(signal.SIGKILL)
        proc.popen.wait(timeout=GROUP_GRACE_S + 30)
        return victims[0] if victims else proc.pid

    def pause(self, name: str, child: bool = False) -> int:
        """SIGSTOP the process (or the process it runs); return the pid stopped."""
        proc = self.procs[name]
        assert proc.popen is not None
        victims = _children(proc.pid) if child else []
        pid = victims[0] if victims else proc.pid
        os.kill(pid, signal.SIGSTOP)
        return pid

    def release(self, name: str) -> None:
        proc = self.procs[name]
        proc.held = False
        self.poll()

    def stop_all(self, grace: float = 60.0) -> list[str]:
        """SIGTERM to every process, then wait; what did not stop in `grace` or stopped with a
        failure is returned (and killed)."""
        failures = []
        for proc in self.procs.values():
            proc.held = True
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGTERM)
        for proc in self.procs.values():
            assert proc.popen is not None
            try:
                code = proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                failures.append(f"{proc.name} still running {grace:.0f} s after SIGTERM")
                proc.signal(signal.SIGKILL)
                proc.popen.wait(timeout=10)
                continue
            # `rowbus apply` reports a stop by SIGTERM as 128 + 15, as a shell would.
            stopped = (0, 128 + signal.SIGTERM, *([-signal.SIGTERM] if proc.dies_on_term else []))
            if code not in stopped and not proc.killed:
                failures.append(f"{proc.name} stopped with {_describe(code)}: {_tail(proc.log)}")
            with contextlib.suppress(Exception):
                self.clear_group(proc)
        return failures


class Services:
    """Faults of the embedded stack's broker and ZooKeeper, by their recorded pids."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def _record(self, name: str) -> ProcessRecord:
        record = ProcessRecord.load(self.stack.pid_dir, name)
        assert record is not None, f"{name} is not running"
        return record

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self._record(name).pid, sig)

    def kill(self, name: str) -> None:
        record = self._record(name)
        began = started_at(record.pid)
        os.kill(record.pid, signal.SIGKILL)
        wait_for(lambda: gone(record.pid, began), timeout=10, what=f"{name} to die")

    def shutdown(self, name: str) -> None:
        service = next(s for s in self.stack.services if s.name == name)
        service.shutdown(self._record(name))

    def heal(self) -> None:
        """Start whatever of the stack is down (the port of a killed server may take a moment
        to be free again)."""
        for svc in ("kafka", "zookeeper"):
            with contextlib.suppress(AssertionError, ProcessLookupError):
                self.signal(svc, signal.SIGCONT)
        wait_for(lambda: self.stack.up() or True, timeout=90, what="the stack to be up again")


# ---- the load and the probes ------------------------------------------------------------------


@dataclass
class Probes:
    """Probe rows: when each was committed upstream and when the sink first showed it."""

    committed: dict[str, list[float]] = field(default_factory=dict)
    visible: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, source: str) -> int:
        with self.lock:
            self.committed.setdefault(source, []).append(0.0)
            return len(self.committed[source])

    def mark(self, source: str, probe: int) -> None:
        with self.lock:
            self.committed[source][probe - 1] = time.monotonic()

    def seen(self, source: str, upto: int) -> None:
        now = time.monotonic()
        with self.lock:
            shown = self.visible.setdefault(source, [])
            shown.extend([now] * (upto - len(shown)))

    def lags(self) -> list[float]:
        with self.lock:
            return [
                v - c
                for s, shown in self.visible.items()
                for c, v in zip(self.committed[s], shown, strict=False)
                if c > 0
            ]

    def recovery(self, healed_at: float) -> float | None:
        """Seconds from `healed_at` until a probe committed after it shows on every source."""
        worst = 0.0
        with self.lock:
            for source in list(self.committed):
                committed = self.committed.get(source, [])
                shown = self.visible.get(source, [])
                first = next((i for i, c in enumerate(committed) if c >= healed_at), None)
                if first is None or first >= len(shown):
                    return None
                worst = max(worst, shown[first] - healed_at)
        return worst


def _connect(server: MySQLSettings) -> pymysql.connections.Connection[Any]:
    return mysql.connect(server, autocommit=False, connect_timeout=10)


class SourceLoad(threading.Thread):
    """W2 on one source at `rate` steps/s, a three-table transaction every tenth step, a probe
    row every `rate/10` steps."""

    def __init__(
        self, name: str, server: MySQLSettings, w2: W2, rate: float, probes: Probes
    ) -> None:
        super().__init__(name=f"load-{name}", daemon=True)
        self.source = name
        self.server = server
        self.w2 = w2
        self.rate = rate
        self.probes = probes
        self.stop = threading.Event()
        self.writing = threading.Event()
        self.writing.set()
        self.idle = threading.Event()
        self.changes = 0
        self.step = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with _connect(self.server) as conn:
                    self._loop(conn)
                if self.stop.is_set():
                    break
                # Paused (the source restarts): disconnected, until resumed. Bounded: the
                # nemesis resumes it after the fault, or stops it at the end of the run.
                self.idle.set()
                while not self.writing.wait(1.0):
                    if self.stop.is_set():
                        return
                self.idle.clear()
        except BaseException as exc:  # noqa: BLE001 - reported by the run
            self.error = exc

    def pause(self) -> None:
        """Finish the step under way, disconnect and wait: the application drains before a
        planned restart of its server, so no transaction of the load is left in doubt."""
        self.writing.clear()
        wait_for(
            lambda: self.idle.is_set() or not self.is_alive(),
            timeout=60,
            what=f"{self.name} to pause",
        )

    def resume(self) -> None:
        self.writing.set()

    def _loop(self, conn: pymysql.connections.Connection[Any]) -> None:
        interval = 1.0 / self.rate
        probe_every = max(1, int(self.rate / 10))
        next_at = time.monotonic()
        while not self.stop.is_set() and self.writing.is_set():
            self.step += 1
            step = self.step
            self.changes += self._multi(conn) if step % 10 == 0 else self.w2.step(conn)
            if step % probe_every == 0:
                probe = self.probes.add(self.source)
                with conn.cursor() as cur:
                    cur.execute(
                        f"INSERT INTO `{self.w2.schema}`.lag_probe VALUES (%s, 0)", (probe,)
                    )
                conn.commit()
                self.probes.mark(self.source, probe)
                self.changes += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)

    def _multi(self, conn: pymysql.connections.Connection[Any]) -> int:
        """One transaction over three tables: an insert, an update, a delete."""
        w2, rng = self.w2, self.w2.rng
        a, b, c = rng.sample(range(w2.tables), 3)
        key = w2.next_key
        w2.next_key += 1
        changes = 1
        deleted: int | None = None
        with conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO `{w2.schema}`.t{a} VALUES (%s, %s, %s, %s, NOW(6))",
                (key, rng.randint(0, 1000), f"m{key}", Decimal(rng.randint(0, 10**8)) / 100),
            )
            if w2.keys[b]:
                cur.execute(
                    f"UPDATE `{w2.schema}`.t{b} SET qty = qty + 1, label = %s WHERE id = %s",
                    (f"m{rng.randint(0, 999)}", rng.choice(w2.keys[b])),
                )
                changes += 1
            if w2.keys[c]:
                deleted = w2.keys[c][rng.randrange(len(w2.keys[c]))]
                cur.execute(f"DELETE FROM `{w2.schema}`.t{c} WHERE id = %s", (deleted,))
                changes += 1
        conn.commit()
        w2.keys[a].append(key)
        if deleted is not None:
            w2.keys[c].remove(deleted)
        return changes


def watch_probes(sink: MySQLSettings, schemas: dict[str, str], probes: Probes, stop: Any) -> None:
    """Poll the sink (directly, not through the proxy) for the highest probe of each source:
    the apply job writes each source's probes in commit order."""
    conn: pymysql.connections.Connection[Any] | None = None
    while not stop.wait(0.2):
        try:
            if conn is None:
                conn = _connect(sink)
            for source, schema in schemas.items():
                with conn.cursor() as cur:
                    cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM `{schema}`.lag_probe")
                    row = cur.fetchone()
                conn.commit()
                probes.seen(source, int(row[0]) if row else 0)
        except pymysql.MySQLError:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            conn = None
    if conn is not None:
        conn.close()


# ---- the run ----------------------------------------------------------------------------------


def hidden_records(kafka_config: dict[str, Any], spark_checkpoint: Path) -> list[str]:
    """The data partitions where the broker hides committed records from the apply job: read
    read_committed from the job's last planned offsets they return nothing, read_uncommitted
    they return records (noida-db's abort-skip, docs/operations.md). Run when the sink ends
    unequal, to tell the broker's fault from rowbus's."""
    from rowbus.clients import kafka

    offsets = sorted(
        (spark_checkpoint / "offsets").glob("[0-9]*"), key=lambda f: int(f.name), reverse=True
    )
    if not offsets:
        return []
    planned = json.loads(offsets[0].read_text().strip().splitlines()[-1])
    parts = [
        kafka.kafka_tp(topic, int(p), int(o))
        for topic, by_part in planned.items()
        for p, o in by_part.items()
    ]
    counts: dict[str, Counter[tuple[str, int]]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = kafka.consumer(kafka_config, **{"isolation.level": isolation})
        seen: Counter[tuple[str, int]] = Counter()
        try:
            consumer.assign(parts)
            end = time.monotonic() + 8.0
            while time.monotonic() < end:
                for m in consumer.consume(1000, 0.5):
                    if m.error() is None:
                        seen[(m.topic() or "", m.partition() or 0)] += 1
        finally:
            consumer.close()
        counts[isolation] = seen
    return [
        f"{tp.topic}[{tp.partition}]@{tp.offset}: read_committed 0 records in 8 s, "
        f"read_uncommitted {n}"
        for tp in parts
        if not counts["read_committed"][(tp.topic, tp.partition)]
        and (n := counts["read_uncommitted"][(tp.topic, tp.partition)])
    ]


def checkpoint_epochs(
    kafka_config: dict[str, Any], topic: str, timeout_s: float = 60.0
) -> dict[str, list[tuple[int, int, str]]]:
    """Each source's committed checkpoints on the checkpoints `topic`, in log order, as
    (offset, epoch, reader id): read read_committed from the start (where noida-db's
    abort-skip does not hide records) to the partitions' ends. Read after the readers stopped,
    so no transaction is open."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError

    from rowbus.clients import kafka
    from rowbus.protocol.codec import decode
    from rowbus.protocol.events import ReaderCheckpoint

    found: dict[str, list[tuple[int, int, str]]] = {}
    consumer = kafka.consumer(kafka_config, **{"enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        consumer.assign([kafka.kafka_tp(topic, p, OFFSET_BEGINNING) for p in partitions])
        left = set(partitions)
        end = time.monotonic() + timeout_s
        while left and time.monotonic() < end:
            for m in consumer.consume(1000, 0.5):
                if (err := m.error()) is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        left.discard(m.partition())
                    continue
                key = m.key() or b""
                if b"/" in key:
                    continue  # fragment records and table states, not checkpoints
                record = decode(m.value(), m.headers(), f"{topic}@{m.offset()}")
                if isinstance(record, ReaderCheckpoint):
                    found.setdefault(record.source, []).append(
                        (m.offset() or 0, record.epoch, record.reader_id)
                    )
    finally:
        consumer.close()
    return found


def epochs_back(epochs: dict[str, list[tuple[int, int, str]]]) -> list[str]:
    """Checkpoints committed by a reader whose term had already ended: an epoch lower than
    one committed before it (a deposed leader that wrote after losing its lease)."""
    found = []
    for source, records in sorted(epochs.items()):
        highest = (-1, -1, "")
        for offset, epoch, reader in records:
            if epoch < highest[1]:
                found.append(
                    f"{source}: checkpoint @{offset} of epoch {epoch} ({reader}) after "
                    f"@{highest[0]} of epoch {highest[1]} ({highest[2]})"
                )
            elif epoch > highest[1]:
                highest = (offset, epoch, reader)
    return found


SELF_FENCED = "while leading"
"""In a reader's log: its ZooKeeper session was suspended or lost while it led (`leader.py`),
and it stopped publishing."""
BROKER_FENCED = "another reader took this source over"
"""In a reader's log: the broker fenced its producer (a zombie that had not stopped itself)."""


@dataclass
class Outcome:
    faults: Counter[str] = field(default_factory=Counter)
    recoveries: list[tuple[str, float | None]] = field(default_factory=list)
    changes: int = 0
    verify_code: int = -1
    verify_line: str = ""
    source_rows: int = 0
    sink_rows: int = 0
    catch_up_s: float = 0.0
    stop_failures: list[str] = field(default_factory=list)
    subscriber_line: str = "-"
    leases_line: str = "-"
    hidden: list[str] = field(default_factory=list)
    load_errors: list[str] = field(default_factory=list)


class Nemesis:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        offset = int(os.environ.get("ROWBUS_TEST_PORT_OFFSET", "0"))
        self.home = ROOT / f".rowbus-test-nemesis-{offset}"
        ports = {k: v + offset + args.port_shift for k, v in TEST_PORTS.items()}
        self.settings = load_settings(None, local={"state_dir": str(self.home), "ports": ports})
        self.stack = LocalStack(self.settings)
        self.kinds = choose_kinds(args.kinds, args.without)
        self.pairs: Pairs | None = None
        if "failover-source" in self.kinds:
            quiet_sources(self.stack)
            self.pairs = Pairs(self.stack, self.settings, SOURCES)
        self.spark: SparkCluster | None = None
        if "kill-spark-worker" in self.kinds:
            self.spark = SparkCluster(
                self.home / "spark", SPARK_WORKERS, port=PORT_BASE + args.port_shift
            )
        self.services = Services(self.stack)
        self.supervisor = Supervisor()
        self.proxies: dict[str, Proxy] = {}
        self.probes = Probes()
        self.writers: dict[str, SourceLoad] = {}
        self.prefix = ""
        self.run_id = ""
        self.subscriber_out = self.home / "logs" / "subscriber.jsonl"
        self.began = time.monotonic()
        self.schemas = {s: f"nem_{s}" for s in ALL_SOURCES}
        self.outcome = Outcome()
        self.pending: list[tuple[str, float]] = []
        self.bulk_rows = 0
        self._never = threading.Event()  # paces the supervising loops (never set)

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.began:7.1f}s] {text}", flush=True)

    # -- setup --

    def _servers(self) -> dict[str, tuple[str, int]]:
        """What the rowbus processes reach through a proxy each: the sources, the sink and
        ZooKeeper (the nemesis's own reads and verify go to them directly)."""
        servers = {
            name: (self.settings.resolved_sink if name == "sink" else self.settings.source(name))
            for name in (*SOURCES, "sink")
        }
        host, port = (self.settings.zookeeper.hosts or "").split(",")[0].rsplit(":", 1)
        replicas = (
            {f"{s}-replica": self.pairs.replica_address(s) for s in SOURCES} if self.pairs else {}
        )
        return {
            **{name: (server.host, server.port) for name, server in servers.items()},
            **replicas,
            "zookeeper": (host, int(port)),
        }

    def _configs(self) -> tuple[Path, Path]:
        """The pipeline's configuration (sources and sink through the proxies) and the direct
        one verify reads."""
        run = time.strftime("%Y%m%d%H%M%S")
        prefix = f"rowbus.nemesis-{run}"
        data = json.loads(self.settings.model_dump_json())
        data.pop("local")
        data["sources"] = [
            {
                **self.settings.source(SERVER_OF[name]).plain(),
                "name": name,
                "include_schemas": [self.schemas[name]],
            }
            for name in ALL_SOURCES
        ]
        data["sink"] = self.settings.resolved_sink.plain()
        data["zookeeper"]["root"] = f"/rowbus-nemesis-{run}"
        data["reader"] = {
            **data["reader"],
            "start": "latest",
            "include_schemas": ["nem_*"],
            "heartbeat_interval_s": 0.5,
            "partitions": PARTITIONS,
            "topic_template": prefix + ".{source}",
            "checkpoints_topic": f"{prefix}.checkpoints",
            "schemas_topic": f"{prefix}.schemas",
        }
        data["subscriber"] = {
            **data["subscriber"],
            "memory_limit_events": SUBSCRIBER_MEMORY,
            "read_ahead_events": SUBSCRIBER_MEMORY // 2,
            "spill_dir": str(self.home / "spill"),
            "topic_template": prefix + ".{source}",
            "checkpoints_topic": f"{prefix}.checkpoints",
            "schemas_topic": f"{prefix}.schemas",
        }
        self.prefix = prefix
        self.run_id = run
        data["apply"] = {
            **data["apply"],
            "job": "rowbus-nemesis",
            "topic_template": prefix + ".{source}",
            "schemas_topic": f"{prefix}.schemas",
            "checkpoint_location": str(self.spark_checkpoint(run)),
            "shard_ddl": {"control_topic": f"{prefix}.control", "election": f"nemesis-{run}"},
        }
        if self.spark is not None:
            data["apply"]["master"] = self.spark.url
            data["apply"]["spark_conf"] = {
                **data["apply"].get("spark_conf", {}),
                "spark.executor.memory": "512m",
            }
        direct = self.home / "direct.yaml"
        direct.write_text(yaml.safe_dump(data, sort_keys=False))
        for source in data["sources"]:
            server = SERVER_OF[source["name"]]
            source["port"] = self.proxies[server].port
            if self.pairs is not None:
                # The project's failover path: the reader continues on a listed replica.
                replica = self.proxies[f"{server}-replica"].port
                source["replicas"] = [{"host": "127.0.0.1", "port": replica}]
        data["sink"]["port"] = self.proxies["sink"].port
        data["zookeeper"]["hosts"] = f"127.0.0.1:{self.proxies['zookeeper'].port}"
        piped = self.home / "pipeline.yaml"
        piped.write_text(yaml.safe_dump(data, sort_keys=False))
        # The cluster's nodes run every source their configuration names: only the third.
        cluster = {
            **data,
            "sources": [s for s in data["sources"] if s["name"] in CLUSTER_SOURCES],
        }
        (self.home / "cluster.yaml").write_text(yaml.safe_dump(cluster, sort_keys=False))
        self._create_topics(prefix)
        return piped, direct

    def _create_topics(self, prefix: str) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        from rowbus.clients import kafka
        from rowbus.protocol.topics import (
            CHECKPOINTS_TOPIC_CONFIG,
            CONTROL_TOPIC_CONFIG,
            DATA_TOPIC_CONFIG,
            SCHEMAS_TOPIC_CONFIG,
        )

        wanted = [
            NewTopic(f"{prefix}.{s}", PARTITIONS, 1, config=dict(DATA_TOPIC_CONFIG))
            for s in ALL_SOURCES
        ] + [
            NewTopic(f"{prefix}.checkpoints", 1, 1, config=dict(CHECKPOINTS_TOPIC_CONFIG)),
            NewTopic(f"{prefix}.schemas", 1, 1, config=dict(SCHEMAS_TOPIC_CONFIG)),
            NewTopic(f"{prefix}.control", 1, 1, config=dict(CONTROL_TOPIC_CONFIG)),
        ]
        admin = kafka.admin(self.settings.kafka.client_config())
        for future in admin.create_topics(wanted, operation_timeout=30).values():
            future.result(30)

    def _tables(self) -> dict[str, W2]:
        sink = _connect(self.settings.resolved_sink)
        loads = {}
        try:
            for index, name in enumerate(ALL_SOURCES):
                schema = self.schemas[name]
                w2 = W2(schema, seed=self.args.seed * 10 + index, initial_rows=0)
                with _connect(self.settings.source(SERVER_OF[name])) as conn:
                    w2.create(conn)
                    with conn.cursor() as cur:
                        cur.execute(
                            f"CREATE TABLE `{schema}`.lag_probe (id BIGINT PRIMARY KEY, at DOUBLE)"
                        )
                        cur.execute(
                            f"CREATE TABLE `{schema}`.bulk "
                            "(id BIGINT PRIMARY KEY, pad VARCHAR(200))"
                        )
                        with sink.cursor() as out:
                            out.execute(f"CREATE DATABASE `{schema}`")
                        for table in [*w2.names(), "lag_probe", "bulk"]:
                            cur.execute(f"SHOW CREATE TABLE `{schema}`.`{table}`")
                            row = cur.fetchone()
                            assert row is not None
                            ddl = str(row[1]).replace(
                                f"CREATE TABLE `{table}`", f"CREATE TABLE `{schema}`.`{table}`", 1
                            )
                            with sink.cursor() as out:
                                out.execute(ddl)
                    conn.commit()
                loads[name] = w2
            sink.commit()
        finally:
            sink.close()
        return loads

    def _start(self, config: Path) -> None:
        logs = self.home / "logs"
        logs.mkdir(exist_ok=True)
        env = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        rowbus = [sys.executable, "-X", "faulthandler", "-m", "rowbus", "-c", str(config)]
        for source in SOURCES:
            for replica in READERS:
                name = f"reader-{source}-{replica}"
                args = [*rowbus, "reader", "run", "--source", source, "--reader-id", name]
                self.supervisor.add(Supervised(name, args, logs / f"{name}.log", env))
        cluster = [*rowbus[:-2], "-c", str(config.with_name("cluster.yaml"))]
        for node in NODES:
            args = [*cluster, "reader", "node", "--node-id", node]
            self.supervisor.add(Supervised(node, args, logs / f"{node}.log", env))
        self.supervisor.add(Supervised("apply", [*rowbus, "apply"], logs / "apply.log", env))
        # A Subscriber: `rowbus tail` of source1's topic, at least once through its checkpoint
        # file, its stdout block-buffered as a user's redirect is (PYTHONUNBUFFERED unset).
        tail = [*rowbus, "tail", f"{self.prefix}.{SOURCES[0]}", "--source", SOURCES[0]]
        self.supervisor.add(
            Supervised(
                "subscriber",
                [*tail, "--checkpoint-file", str(self.home / "subscriber.ckpt")],
                logs / "subscriber.log",
                {**env, "PYTHONUNBUFFERED": ""},
                out=self.subscriber_out,
                dies_on_term=True,
                relay=True,
            )
        )

    def _wait_first_batch(self, direct: Settings) -> None:
        from rowbus.status import apply_status

        def applied() -> bool:
            self.supervisor.poll()
            if self.supervisor.crashes:
                raise RuntimeError(self.supervisor.crashes[0])
            return any(j.job == "rowbus-nemesis" for j in apply_status(direct))

        wait_for(
            applied,
            timeout=600,
            what="the apply job's first batch",
            interval=1.0,
            stop_on=(RuntimeError,),
        )

    # -- faults --

    def _leader(self, fault: Fault, root: str) -> str:
        """The reader process the fault is meant for: the source's leader or its standby, as
        ZooKeeper's election says (the first reader when ZooKeeper cannot say)."""
        from rowbus.clients import zookeeper
        from rowbus.producer.leader import contenders

        names = [f"reader-{fault.target}-{r}" for r in READERS]
        with contextlib.suppress(Exception):
            client = zookeeper.start_client(
                self.settings.zookeeper.hosts or "", 5.0, start_timeout=5.0
            )
            try:
                order = [c for c in contenders(client, root, fault.target) if c in names]
            finally:
                client.stop()
                client.close()
            if order:
                leader = order[0]
                return leader if fault.leader else next(n for n in names if n != leader)
        return names[0]

    def _node(self, coordinator: bool, root: str) -> str:
        """The cluster node holding the coordinator role, or (not `coordinator`) the other
        one, as ZooKeeper says (the first node when it cannot say); says which node runs each
        of the cluster's sources."""
        from rowbus.clients import zookeeper
        from rowbus.producer.cluster import zk
        from rowbus.producer.cluster.state import Paths

        leading: str | None = None
        owners: dict[str, str | None] = {}
        with contextlib.suppress(Exception):
            client = zookeeper.start_client(
                self.settings.zookeeper.hosts or "", 5.0, start_timeout=5.0
            )
            try:
                leading = zk.coordinator(client, Paths(root))
                sets = zk.read_view(client, Paths(root)).sets
                owners = {s: sets[s].owner if s in sets else None for s in CLUSTER_SOURCES}
            finally:
                client.stop()
                client.close()
        if leading not in NODES:
            return NODES[0]
        name = leading if coordinator else next(n for n in NODES if n != leading)
        placed = ", ".join(f"{s} on {o or '-'}" for s, o in owners.items())
        self.say(f"  coordinator {leading}, {placed}")
        return name

    def _hold(self, seconds: float) -> None:
        """Wait `seconds` while supervising (restarting what exits)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.supervisor.poll()
            self._never.wait(min(0.25, left))

    def _process(self, fault: Fault, root: str) -> str:
        """The supervised process a kill or stop fault is meant for ("" for the others)."""
        kind = fault.kind
        if kind in ("kill-reader", "stop-reader"):
            return self._leader(fault, root)
        if kind in ("kill-apply", "stop-apply"):
            return "apply"
        if kind == "kill-subscriber":
            return "subscriber"
        if kind in ("kill-cluster-node", "kill-coordinator"):
            return self._node(kind == "kill-coordinator", root)
        return ""

    def inject(self, fault: Fault, root: str) -> None:
        kind, d = fault.kind, fault.duration
        sup, svc = self.supervisor, self.services
        action: Callable[[], None]
        name = self._process(fault, root)
        where = name or fault.target
        self.say(f"fault {kind} {where} for {d:.1f}s".replace("  ", " "))
        driver = kind.endswith("-apply") and fault.leader
        if kind in (
            "kill-reader",
            "kill-apply",
            "kill-subscriber",
            "kill-cluster-node",
            "kill-coordinator",
        ):
            pid = sup.kill(name, child=driver)
            self.say(f"  killed pid {pid}{' (the driver)' if driver else ''}")
            self._hold(d)
            action = lambda: sup.release(name)  # noqa: E731
        elif kind in ("stop-reader", "stop-apply"):
            pid = sup.pause(name, child=driver)
            self._hold(d)
            action = lambda: _resume(pid)  # noqa: E731
        elif kind in ("kill-broker", "kill-zookeeper"):
            sup.broker_killed |= kind == "kill-broker"
            svc.kill("kafka" if kind == "kill-broker" else "zookeeper")
            self._hold(d)
            action = svc.heal
        elif kind in ("stop-broker", "stop-zookeeper"):
            target = "kafka" if kind == "stop-broker" else "zookeeper"
            svc.signal(target, signal.SIGSTOP)
            self._hold(d)
            action = lambda: svc.signal(target, signal.SIGCONT)  # noqa: E731
        elif kind == "restart-broker":
            sup.broker_restarted = True
            svc.shutdown("kafka")
            self._hold(d)
            action = svc.heal
        elif kind in ("restart-sink", "restart-source"):
            action = self._restart("sink" if kind == "restart-sink" else fault.target, d)
        elif kind == "lag-zookeeper":
            action = self._lag_past_session(d)
        elif kind == "full-spill-disk":
            action = self._full_spill(d)
        elif kind == "failover-source":
            action = self._failover(fault.target, d)
        elif kind == "kill-spark-worker":
            action = self._kill_worker(0 if fault.leader else 1, d)
        else:
            server = "zookeeper" if kind.endswith("-zookeeper") else fault.target or "sink"
            action = self._network(kind, self._proxies_of(server), d)
        action()
        self.outcome.faults[kind] += 1
        self.pending.append((kind, time.monotonic()))

    def _proxies_of(self, server: str) -> list[Proxy]:
        """The proxies a network fault of `server` acts on: a source server's replica too (a
        reader cut from its source is cut from both)."""
        replica = self.proxies.get(f"{server}-replica")
        return [self.proxies[server], *([replica] if replica is not None else [])]

    def _network(self, kind: str, proxies: list[Proxy], seconds: float) -> Callable[[], None]:
        """Cut, stall or slow the connections at `proxies` for `seconds`; return what heals
        them."""
        for proxy in proxies:
            if kind.startswith("cut-"):
                proxy.cut()
            elif kind.startswith("stall-"):
                proxy.stall()
            elif kind.startswith("lag-"):
                proxy.lag(LAG_S)
            else:
                raise ValueError(kind)
        self._hold(seconds)

        def heal() -> None:
            for proxy in proxies:
                proxy.restore() if kind.startswith("cut-") else proxy.resume()
                proxy.lag(0)

        return heal

    def _failover(self, server: str, seconds: float) -> Callable[[], None]:
        """`server`'s primary shut down and its replica promoted for `seconds`
        (`benchmarks.failover`): the load of its sources drains, waits, and goes on against
        the new primary; the readers find it through their `replicas` setting. Return the
        heal: the old primary back as the new one's replica."""
        assert self.pairs is not None
        writers = [self.writers[s] for s in sources_on(server) if s in self.writers]
        for writer in writers:
            writer.pause()
        try:
            primary, heal = self.pairs.failover(
                server, lambda: self.services.shutdown(server), self.services.heal
            )
        except Exception as exc:  # noqa: BLE001 - the run's failure, said in its summary
            self.outcome.load_errors.append(f"failover-source {server}: {exc}")
            for writer in writers:
                writer.resume()
            return lambda: None
        for writer in writers:
            writer.server = primary
            writer.resume()
        self.say(f"  {self.pairs.where(server)}")
        self._hold(seconds)
        return heal

    def _primary(self, server: str) -> MySQLSettings:
        """Where `server`'s sources take writes now (its replica after a failover)."""
        return self.pairs.primary(server) if self.pairs else self.settings.source(server)

    def _kill_worker(self, worker: int, seconds: float) -> Callable[[], None]:
        """kill -9 of Spark worker `worker` with its executor and Python workers (a machine
        lost) for `seconds`; return the heal: the worker started again (the job must go on,
        on the other worker meanwhile)."""
        spark = self.spark
        assert spark is not None
        spark.kill_worker(worker)
        self.say(f"  killed worker{worker} and its executor")
        self._hold(seconds)

        def registered() -> bool:
            self.supervisor.poll()
            return spark.workers_alive()

        def heal() -> None:
            spark.restart_worker(worker)
            try:
                # Supervising meanwhile: a JVM's start takes 10-30 s on the loaded machine.
                wait_for(
                    registered,
                    timeout=180,
                    interval=0.5,
                    what=f"worker{worker} to register with {spark.url} again",
                )
            except Exception as exc:  # noqa: BLE001 - the run's failure, said in its summary
                self.outcome.load_errors.append(f"kill-spark-worker: {exc}")

        return heal

    def _lag_past_session(self, seconds: float) -> Callable[[], None]:
        """ZooKeeper's connections slowed by LAG_S for `seconds` / 2, then by more than the
        session timeout for longer than it: no ping is answered in time, every session held
        through the proxy expires, and a leader must stop publishing before its successor
        takes over. Return what lifts the lag."""
        proxy = self.proxies["zookeeper"]
        past = self.settings.zookeeper.session_timeout_s + PAST_SESSION_S
        proxy.lag(LAG_S)
        self._hold(seconds / 2)
        self.say(f"  lag past the session timeout: {past:.1f}s for {past:.1f}s")
        proxy.lag(past)
        self._hold(past)
        return lambda: proxy.lag(0)

    def _full_spill(self, seconds: float) -> Callable[[], None]:
        """The Subscriber's spill folder on a full disk for `seconds` (its files may not grow
        past SPILL_FILE_LIMIT, a start during the fault included) while source1 commits one
        transaction of BULK_ROWS rows, which it must spill; it stops with one line (restarted
        by the operator) or waits, and loses nothing. Return what frees the disk."""
        proc = self.supervisor.procs["subscriber"]
        self.supervisor.spill_limited = True
        proc.file_limit = SPILL_FILE_LIMIT
        _limit_files(proc.pid, SPILL_FILE_LIMIT)
        schema = self.schemas[SOURCES[0]]
        first = self.bulk_rows + 1
        self.bulk_rows += BULK_ROWS
        with _connect(self._primary(SOURCES[0])) as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO `{schema}`.bulk VALUES (%s, %s)",
                [(i, f"{i:08d}" + "p" * 192) for i in range(first, self.bulk_rows + 1)],
            )
            conn.commit()
        self.outcome.changes += BULK_ROWS
        self.say(f"  {SOURCES[0]}: one transaction of {BULK_ROWS} rows for the Subscriber to spill")
        self._hold(seconds)

        def heal() -> None:
            proc.file_limit = None
            if proc.popen is not None and proc.popen.poll() is None:
                _limit_files(proc.pid, None)

        return heal

    def _restart(self, server: str, seconds: float) -> Callable[[], None]:
        """Shut the MariaDB server down cleanly (its own SHUTDOWN), keep it down `seconds`;
        return what starts it again. The load of every source on it (a cluster source's
        too: its writer died on the shutdown in seed 11) pauses first and resumes once the
        server is back, as an application drains before a planned restart."""
        writers = [self.writers[s] for s in sources_on(server) if s in self.writers]
        for writer in writers:
            writer.pause()
        self.services.shutdown(server)
        self._hold(seconds)

        def heal() -> None:
            self.services.heal()
            for writer in writers:
                writer.resume()

        return heal

    def heal_all(self) -> None:
        for proxy in self.proxies.values():
            proxy.lag(0)
            proxy.resume()
            proxy.restore()
        self.services.heal()
        for proc in self.supervisor.procs.values():
            proc.signal(signal.SIGCONT)
            proc.held = False
        self.supervisor.poll()

    # -- the whole run --

    def run(self) -> int:
        args = self.args
        self.stack.down()
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        self.say(f"stack up under {self.home}")
        self.stack.up()
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(self.stack.down)
            self._start_extras(cleanup)
            proxy_class = _proxy_class()
            for name, address in self._servers().items():
                self.proxies[name] = proxy_class(address)
                cleanup.callback(self.proxies[name].close)
            piped, direct_path = self._configs()
            direct = load_settings(direct_path)
            root = direct.zookeeper.root
            loads = self._tables()
            cleanup.callback(self._stop_processes)
            self._start(piped)
            self.say("readers and the apply job started; waiting for the first batch")
            self._wait_first_batch(direct)
            self.say("first batch applied; the load and the faults begin")
            # The cluster's sources at a quarter of the rate each: together as much as half a
            # source, which the 2 cores can afford.
            writers = [
                SourceLoad(
                    name,
                    direct.source(name),
                    loads[name],
                    args.rate / 4 if name in CLUSTER_SOURCES else args.rate,
                    self.probes,
                )
                for name in ALL_SOURCES
            ]
            self.writers = {w.source: w for w in writers}
            stop_watch = threading.Event()
            watcher = threading.Thread(
                target=watch_probes,
                args=(direct.resolved_sink, self.schemas, self.probes, stop_watch),
                daemon=True,
            )
            for thread in [*writers, watcher]:
                thread.start()
            cleanup.callback(stop_watch.set)
            start = time.monotonic()
            count = max(1, round(args.seconds / 16)) if args.faults is None else args.faults
            for fault in plan(args.seed, args.seconds, count, kinds=self.kinds):
                self._hold(max(0.0, start + fault.at - time.monotonic()))
                self.inject(fault, root)
                if any(w.error for w in writers):
                    break
            self._hold(max(0.0, start + args.seconds - time.monotonic()))
            for w in writers:
                w.stop.set()
            for w in writers:
                w.join(30)
                self.outcome.changes += w.changes
                if w.error is not None:
                    self.outcome.load_errors.append(f"{w.name}: {w.error!r}")
            self.say(f"load stopped after {self.outcome.changes:,} row changes; healing")
            self._end(direct, direct_path)
            stop_watch.set()
            watcher.join(10)
        return self._summary()

    def _end(self, direct: Settings, direct_path: Path) -> None:
        """After the load: heal, wait for an equal sink, verify, check the Subscriber, stop
        every process, check the leases."""
        self.heal_all()
        self._catch_up(direct)
        self._verify(direct_path)
        self._check_subscriber(direct)
        if self.outcome.verify_code != 0:
            self.outcome.hidden = hidden_records(
                self.settings.kafka.client_config(), self.spark_checkpoint(self.run_id)
            )
        self.outcome.stop_failures = self.supervisor.stop_all()
        if self.spark is not None:
            # Before the cluster stops: a master or worker gone now died unbidden.
            self.outcome.stop_failures += [
                f"spark {name} exited without a fault" for name in self.spark.exited()
            ]
        self._check_leases()

    def _start_extras(self, cleanup: contextlib.ExitStack) -> None:
        """What some kinds need beside the stack: the sources' replicas, the Spark cluster."""
        if self.pairs is not None:
            cleanup.callback(self.pairs.stop)
            self.pairs.start()
            self.say(
                "each source server has a replica: "
                + ", ".join(self.pairs.where(s) for s in SOURCES)
            )
        if self.spark is not None:
            cleanup.callback(self.spark.stop)
            self.spark.start()
            self.say(f"the apply job runs on {self.spark.url} ({SPARK_WORKERS} workers)")

    def _stop_processes(self) -> None:
        # On an error path: whatever still runs is stopped (no-op after stop_all).
        for proc in self.supervisor.procs.values():
            if proc.popen is not None and proc.popen.poll() is None:
                proc.held = True
                with contextlib.suppress(Exception):
                    proc.signal(signal.SIGCONT)
                    proc.signal(signal.SIGKILL)
                    proc.popen.wait(10)
                    self.supervisor.clear_group(proc)

    def _catch_up(self, direct: Settings) -> None:
        began = time.monotonic()
        last: list[Any] = []
        if self.pairs is not None:
            # verify and the Subscriber check read the stack's servers, whichever role each
            # has now: a standby must hold what its primary holds.
            self.outcome.load_errors += self.pairs.settle()
            self.say("failover pairs: " + "; ".join(self.pairs.where(s) for s in SOURCES))

        def equal() -> bool:
            nonlocal last
            # verify reads every table: once per 5 s (wait_for's own pace is 0.5 s at most)
            self._hold(5.0)
            last = verify(direct, schemas=["nem_*"])
            missing = sum(d.source_rows - d.target_rows for d in last)
            self.say(f"sink: {missing:,} row(s) missing, {sum(not d.equal for d in last)} differ")
            return bool(last) and all(d.equal for d in last)

        with contextlib.suppress(Exception):
            wait_for(equal, timeout=self.args.catch_up_timeout, what="the sink")
        self.outcome.catch_up_s = time.monotonic() - began

    def _verify(self, config: Path) -> None:
        done = subprocess.run(
            [*ROWBUS_CLI, "-c", str(config), "verify", "--schema", "nem_*", "--json"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        self.outcome.verify_code = done.returncode
        tables = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        self.outcome.source_rows = sum(int(t["source_rows"]) for t in tables)
        self.outcome.sink_rows = sum(int(t["target_rows"]) for t in tables)
        differing = sum(bool(t["differences"] or t["error"]) for t in tables)
        differences = sum(int(t["differences"]) for t in tables)
        self.outcome.verify_line = (
            f"exit {done.returncode}: {differences} differences, {differing} of {len(tables)} "
            "tables differ"
            + (f"; stderr: {done.stderr.strip().splitlines()[-1]}" if done.stderr.strip() else "")
        )

    def spark_checkpoint(self, run: str) -> Path:
        return self.home / f"spark-checkpoint-{run}"

    def _printed_probes(self) -> list[int]:
        """The probe ids of source1 in the Subscriber's output, in the order printed (a line
        cut short by a kill -9 is skipped: its transaction is printed again on restart)."""
        ids = []
        with contextlib.suppress(FileNotFoundError), self.subscriber_out.open() as out:
            for line in out:
                if '"lag_probe"' not in line:
                    continue
                try:
                    txn = json.loads(line)
                except ValueError:
                    continue
                ids += [
                    int(e["after"]["id"])
                    for e in txn["events"]
                    if e.get("table") == "lag_probe" and e.get("op") == "insert"
                ]
        return ids

    def _check_subscriber(self, direct: Settings) -> None:
        """Every probe row committed on source1 printed by the Subscriber, first in commit
        order; repeats only as the replay of a restart (at least once)."""
        with _connect(direct.source(SOURCES[0])) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id FROM `{self.schemas[SOURCES[0]]}`.lag_probe")
            committed = {int(r[0]) for r in cur.fetchall()}
        printed: list[int] = []

        def caught_up() -> bool:
            nonlocal printed
            self._hold(2.0)
            printed = self._printed_probes()
            return committed <= set(printed)

        with contextlib.suppress(Exception):
            wait_for(caught_up, timeout=300, what="the Subscriber's output")
        first = list(dict.fromkeys(printed))
        missing = len(committed - set(printed))
        unknown = len(set(printed) - committed)
        repeats = len(printed) - len(first)
        restarts = self.supervisor.restarts["subscriber"]
        problems = [
            *([f"{missing} committed probe(s) never printed"] if missing else []),
            *([f"{unknown} printed probe(s) never committed"] if unknown else []),
            *(["printed out of commit order"] if first != sorted(first) else []),
            *([f"{repeats} repeat(s) without a restart"] if repeats and not restarts else []),
        ]
        self.outcome.subscriber_line = (
            f"{len(first):,} of {len(committed):,} probes of {SOURCES[0]} printed, in commit "
            f"order; {repeats} repeated after {restarts} restart(s)"
            if not problems
            else "; ".join(problems)
        )
        if problems:
            self.outcome.load_errors.append(f"subscriber: {self.outcome.subscriber_line}")

    def _check_leases(self) -> None:
        """Leaders that stopped themselves on a lost ZooKeeper session, terms the broker
        fenced, and no checkpoint committed by a deposed leader (each source's epochs never go
        back in the checkpoints topic). Run once the readers stopped."""
        logs = [
            p.log for n, p in self.supervisor.procs.items() if n.startswith(("reader-", "node-"))
        ]
        texts = [log.read_text(errors="replace") if log.exists() else "" for log in logs]
        self_fenced = sum(t.count(SELF_FENCED) for t in texts)
        broker_fenced = sum(t.count(BROKER_FENCED) for t in texts)
        try:
            epochs = checkpoint_epochs(
                self.settings.kafka.client_config(), f"{self.prefix}.checkpoints"
            )
        except Exception as exc:  # noqa: BLE001 - reported as the run's failure
            self.outcome.load_errors.append(f"leases: checkpoints unreadable: {exc!r}")
            return
        back = epochs_back(epochs)
        self.outcome.load_errors += [f"leases: {b}" for b in back]
        terms = ", ".join(
            f"{s} {len({e for _, e, _ in r})} terms" for s, r in sorted(epochs.items())
        )
        self.outcome.leases_line = (
            f"{self_fenced} leader(s) stopped on a lost ZooKeeper session, {broker_fenced} "
            f"term(s) fenced by the broker; checkpoints "
            + ("in epoch order" if not back else f"{len(back)} back in epoch")
            + f" ({terms})"
        )

    def _noticed(self) -> list[str]:
        """Lines in the processes' logs worth a look even when the run passed."""
        found = []
        for proc in self.supervisor.procs.values():
            text = proc.log.read_text(errors="replace") if proc.log.exists() else ""
            for needle in ("Fatal Python error", "StackOverflowError", "Traceback"):
                if n := text.count(needle):
                    found.append(f"{proc.log.name}: {needle} x{n}")
        return found

    def _summary(self) -> int:
        o, sup = self.outcome, self.supervisor
        for kind, healed in self.pending:
            o.recoveries.append((kind, self.probes.recovery(healed)))
        times = [t for _, t in o.recoveries if t is not None]
        unrecovered = sum(t is None for _, t in o.recoveries)
        longest = max(o.recoveries, key=lambda r: -1 if r[1] is None else r[1], default=None)
        by_kind: dict[str, list[float]] = {}
        for kind, t in o.recoveries:
            if t is not None:
                by_kind.setdefault(kind, []).append(t)
        lags = self.probes.lags()
        crashed = [*sup.crashes, *o.stop_failures, *o.load_errors]
        ok = o.verify_code == 0 and not crashed
        lines = [
            "",
            f"nemesis summary: seed {self.args.seed}, {self.args.seconds:.0f} s of load, "
            f"{sum(o.faults.values())} faults",
            "  faults       : " + ", ".join(f"{k} {n}" for k, n in sorted(o.faults.items())),
            f"  kinds drawn  : {kinds_line(self.kinds)}",
            f"  rows offered : {o.changes:,} row changes (W2 + 3-table transactions + probes, "
            f"{len(ALL_SOURCES)} sources)",
            f"  rows applied : sink tables hold {o.sink_rows:,} rows, "
            f"the sources {o.source_rows:,}",
            f"  recoveries   : {len(times)} measured (heal -> a later probe of each source in the "
            f"sink), p50 {_s(_pct(times, 0.5))}, p99 {_s(_pct(times, 0.99))}, longest "
            + (f"{_s(longest[1])} ({longest[0]})" if longest and longest[1] else "-")
            + (f"; {unrecovered} never measured" if unrecovered else ""),
            "  per kind     : "
            + ", ".join(
                f"{k} {len(v)}x p50/p99/max {_pct(v, 0.5):.1f}/{_pct(v, 0.99):.1f}/{max(v):.1f}s"
                for k, v in sorted(by_kind.items())
            ),
            "  restarts     : "
            + (", ".join(f"{k} {n}" for k, n in sorted(sup.restarts.items())) or "none"),
            f"  lag          : p50 {_s(_pct(lags, 0.5))}, p99 {_s(_pct(lags, 0.99))} "
            f"({len(lags)} probes, faults included)",
            f"  catch-up     : {o.catch_up_s:.1f} s from the heal to an equal sink",
            f"  verify       : {o.verify_line}",
            f"  subscriber   : {o.subscriber_line}",
            f"  leases       : {o.leases_line}",
            f"  crashes      : {len(crashed) or 'none'}",
            *(f"    {c}" for c in crashed),
            *(f"  leftover     : {x}" for x in sup.leftovers),
            *(f"  refused      : {x}" for x in refusals_lines(sup.refusals)),
            *(f"  noticed      : {x}" for x in self._noticed()),
            *(f"  broker hides : {x}" for x in o.hidden),
            f"  verdict      : {'EQUAL' if ok else 'FAILED'}",
        ]
        print("\n".join(lines), flush=True)
        return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.nemesis", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=600.0, help="load and faults (600)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults", type=int, default=None, help="default: one per 16 s; 0: a baseline run"
    )
    parser.add_argument(
        "--kinds", default=None, help="fault kinds to draw from, comma-separated (all)"
    )
    parser.add_argument(
        "--without",
        default=None,
        help="fault kinds not to draw, comma-separated (e.g. kill-broker,stop-broker,"
        "restart-broker: a run without the test broker's own faults)",
    )
    parser.add_argument("--rate", type=float, default=60.0, help="W2 steps/s per source (60)")
    parser.add_argument("--catch-up-timeout", type=float, default=900.0)
    parser.add_argument(
        "--port-shift", type=int, default=50, help="ports: the tests' + offset + this (50)"
    )
    args = parser.parse_args(argv)
    try:
        choose_kinds(args.kinds, args.without)
    except ValueError as exc:
        parser.error(str(exc))

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    return Nemesis(args).run()


if __name__ == "__main__":
    raise SystemExit(main())
