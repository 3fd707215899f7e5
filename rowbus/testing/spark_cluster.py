"""A Spark standalone cluster on loopback from the installed pyspark: one master, N workers
(the standalone e2e test and ``benchmarks.apply --cluster``).

Every process starts in its own session (process group), recorded by pid; `stop()` ends each
group (the worker's executor JVMs and Python workers are its children) with TERM, then KILL.
Readiness is the master's JSON status saying the workers are ALIVE, never a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rowbus.waiting import wait_for

# ROWBUS_TEST_PORT_OFFSET shifts these as it shifts the test service ports: 17000 + offset;
# the master takes PORT_BASE and +1 (web UI), workers +10.. and +20.. (web UIs).
PORT_BASE = 17000 + int(os.environ.get("ROWBUS_TEST_PORT_OFFSET", "0"))


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env() -> dict[str, str]:
    """The environment for spark-class and spark-submit: loopback only, the venv's Python."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }


@dataclass
class SparkCluster:
    """Master and workers; `url` is what ``spark-submit --master`` takes."""

    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    port: int = PORT_BASE
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_port(self) -> int:
        return self.port + 1

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        self.procs[name] = subprocess.Popen(
            cmd, env=spark_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start(self, timeout: float = 120.0) -> SparkCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        for n in range(self.workers):
            self._start_worker(n)
        wait_for(
            self.workers_alive,
            timeout=timeout,
            interval=0.5,
            what=f"a Spark master and {self.workers} ALIVE workers on {self.url}",
        )
        return self

    def _start_worker(self, n: int) -> None:
        work = self.workdir / f"worker{n}"
        work.mkdir(exist_ok=True)
        self._spawn(
            f"worker{n}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port + 10 + n),
            "--webui-port",
            str(self.port + 20 + n),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(work),
            self.url,
        )

    def restart_worker(self, n: int) -> None:
        """Start worker `n` again after `kill_worker(n)` (a machine back); `workers_alive()`
        says when the master has it."""
        self._start_worker(n)

    def workers_alive(self) -> bool:
        """Every worker ALIVE at the master (RuntimeError when a process of the cluster
        exited)."""
        return self._check_alive() and len(self.alive_workers()) == self.workers

    def exited(self) -> list[str]:
        """The cluster's processes that are not running (a worker killed and not restarted
        among them)."""
        return [f"{n} ({p.returncode})" for n, p in self.procs.items() if p.poll() is not None]

    def _check_alive(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"spark {name} exited with {proc.returncode}:\n{log}")
        return True

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = _get_json(f"http://127.0.0.1:{self.ui_port}/json/")
        return data

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]

    @property
    def driver_ui_port(self) -> int:
        """The loopback port a driver's UI should take (its REST API tells running tasks)."""
        return self.port + 30

    def active_tasks_on(self, n: int) -> int:
        """Tasks running now on worker `n`'s executors (0 when none, or no driver UI)."""
        worker = _get_json(f"http://127.0.0.1:{self.port + 20 + n}/json/")
        mine = {str(e.get("id")) for e in worker.get("executors", [])}
        if not mine:
            return 0
        api = f"http://127.0.0.1:{self.driver_ui_port}/api/v1/applications"
        total = 0
        for app in _get_json(api):
            for ex in _get_json(f"{api}/{app['id']}/executors"):
                if str(ex.get("id")) in mine:
                    total += int(ex.get("activeTasks", 0))
        return total

    def kill_worker(self, n: int) -> None:
        """kill -9 of worker `n` with its executor and Python workers (a lost machine)."""
        proc = self.procs[f"worker{n}"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        # Executors a TERM'd worker started live in its group too: end what is left of each.
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback http only
        return json.loads(resp.read())


@contextlib.contextmanager
def spark_cluster(workdir: Path, workers: int = 2, **kwargs: Any) -> Iterator[SparkCluster]:
    cluster = SparkCluster(workdir, workers, **kwargs)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
