"""`rowbus local up | down | status`: the five embedded services on loopback.

`up` installs what is missing, launches every service that is not already running, then waits
for each to be ready (a condition, never a fixed sleep). Running it again is a no-op. `down`
stops exactly the processes recorded under ``<state_dir>/pids`` and nothing else.
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rowbus.config import Settings
from rowbus.exceptions import LocalStackError, WaitTimeoutError
from rowbus.local import install
from rowbus.local.procs import ProcessRecord, is_ours, launch, require_free_port
from rowbus.local.services import MariaDB, Noida, Service, Tansu, ZooKeeper
from rowbus.waiting import wait_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    pid: int | None
    state: str  # "up", "unhealthy" or "down"


@dataclass(frozen=True)
class UpReport:
    installed: list[str]
    started: list[str]
    already_running: list[str]
    seconds: float


class LocalStack:
    """The embedded services described by `settings.local`. No I/O until a method is called."""

    def __init__(self, settings: Settings) -> None:
        local = settings.local
        state = local.state_dir
        ports = local.ports
        self.state_dir = state
        self.broker = local.broker
        self.install = local.install
        broker_cls = Tansu if local.broker == "tansu" else Noida
        self.services: list[Service] = [
            MariaDB(
                "source1", ports.source1, "local.ports.source1", state, server_id=1, binlog=True
            ),
            MariaDB(
                "source2", ports.source2, "local.ports.source2", state, server_id=2, binlog=True
            ),
            MariaDB("sink", ports.sink, "local.ports.sink", state, server_id=100, binlog=False),
            ZooKeeper("zookeeper", ports.zookeeper, "local.ports.zookeeper", state),
            broker_cls("kafka", ports.kafka, "local.ports.kafka", state),
        ]

    @property
    def pid_dir(self) -> Path:
        return self.state_dir / "pids"

    def up(self) -> UpReport:
        began = time.monotonic()
        with self._lock():
            installed = install.ensure_installed(self.broker, self.install)
            pending: list[Service] = []
            running: list[str] = []
            for svc in self.services:
                record = ProcessRecord.load(self.pid_dir, svc.name)
                if record is not None and is_ours(record):
                    running.append(svc.name)
                    continue
                ProcessRecord.forget(self.pid_dir, svc.name)
                require_free_port(svc.port, svc.setting)
                pending.append(svc)
            try:
                for svc in pending:
                    svc.prepare()
                    pid = launch(svc.command(), svc.log_file)
                    ProcessRecord(svc.name, pid, svc.marker, svc.address).save(self.pid_dir)
                    log.info("started %s on %s (pid %s)", svc.name, svc.address, pid)
                for svc in pending:
                    self._await_ready(svc)
                    svc.after_ready()
            except BaseException:
                # Nothing half-started is left behind: stop what this call started.
                self._stop(reversed(pending))
                raise
        return UpReport(installed, [s.name for s in pending], running, time.monotonic() - began)

    def down(self) -> list[str]:
        with self._lock():
            return self._stop(reversed(self.services))

    def _stop(self, services: Iterable[Service]) -> list[str]:
        stopped = []
        for svc in services:
            record = ProcessRecord.load(self.pid_dir, svc.name)
            if record is None:
                continue
            if is_ours(record):
                try:
                    svc.shutdown(record)
                except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                    log.warning("stopping %s: %s", svc.name, exc)
                stopped.append(svc.name)
            ProcessRecord.forget(self.pid_dir, svc.name)
        return stopped

    def status(self) -> list[ServiceStatus]:
        result = []
        for svc in self.services:
            record = ProcessRecord.load(self.pid_dir, svc.name)
            if record is None or not is_ours(record):
                result.append(ServiceStatus(svc.name, svc.address, None, "down"))
                continue
            try:
                healthy = svc.ready()
            except Exception:  # noqa: BLE001 - any probe failure means unhealthy
                healthy = False
            result.append(
                ServiceStatus(svc.name, svc.address, record.pid, "up" if healthy else "unhealthy")
            )
        return result

    def _await_ready(self, svc: Service) -> None:
        record = ProcessRecord.load(self.pid_dir, svc.name)
        assert record is not None

        def probe() -> bool:
            if not is_ours(record):
                raise LocalStackError(f"{svc.name} exited during start-up")
            return svc.ready()

        try:
            wait_for(
                probe,
                timeout=svc.startup_timeout,
                what=f"{svc.name} on {svc.address}",
                stop_on=(LocalStackError,),
            )
        except (WaitTimeoutError, LocalStackError) as exc:
            tail = _tail(svc.log_file)
            raise LocalStackError(
                f"{svc.name} did not become ready: {exc}; log {svc.log_file}: {tail}"
            ) from exc

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(lines[-3:]) or "(empty log)"
