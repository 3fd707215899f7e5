"""CPU seconds by process kind, read from /proc: the job's process tree, the sink, the broker.

`CpuSample.take(sink_port, kafka_port)` reads utime + stime of this process (the driver's
Python: the benchmark runs the job in process), of every descendant (the Spark JVM, the
JVM's Python workers and their children), of the sink server (a ``mariadbd``/``mysqld`` whose
command line names ``--port=<sink port>``) and of the broker (a process naming the Kafka
port), and of a throttling sink proxy (``python -m tests.faults.proxy``, a child of the
benchmark: counted as "sink proxy", not as a Python worker). With source ports, the source
servers and a reader the benchmark started (``rowbus … reader run``) count too, as "source" and
"reader" (`OTHERS`). Two samples subtract; `per_row` prints ``cpu per row: <process> <µs>``,
`cores` the cores each kind used over a window.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
KINDS = ("driver Python", "JVM", "Python workers", "sink", "broker", "sink proxy")
OTHERS = ("reader", "source")
"""Processes around the job that a run with a real reader has: not the job's, not per row."""
PLANNING = "of the Python workers, Spark's calls of the Python data source"
"""The Python workers that are not task workers (``pyspark.daemon pyspark.worker``): those
Spark starts to plan the streaming source's reads (``pyspark.sql.worker.*``, the streaming
source runner), once or more per batch: a per-batch cost inside "Python workers"."""


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(parent pid, its own CPU seconds, those of the children it has waited for) of `pid`,
    None if it is gone: a Python worker the PySpark daemon forked and reaped counts in the
    daemon's figure, not nowhere (it made "Python workers" negative across a window)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = (int(fields[11]) + int(fields[12])) / _TICK
        return int(fields[1]), own, (int(fields[13]) + int(fields[14])) / _TICK
    return None


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    return ""


@dataclass(frozen=True, slots=True)
class CpuSample:
    seconds: dict[str, float]
    """CPU seconds by kind, since each process started, its reaped children included (a
    child that ended unreaped, or whose parent ended, is not counted)."""
    processes: dict[int, tuple[tuple[str, ...], float]]
    """Per process: the kinds it counts for and its seconds. `minus` subtracts per process,
    so one that ended inside the window adds nothing rather than minus what it had spent
    before (Spark starts Python data source workers per batch: "Python workers" went down by
    ~7 µs a row that way)."""

    @staticmethod
    def take(sink_port: int, kafka_port: int, source_ports: tuple[int, ...] = ()) -> CpuSample:
        me = os.getpid()
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        reaped: dict[int, float] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                got = _stat(int(entry.name))
                if got is not None:
                    pid, (parent, own, children) = int(entry.name), got
                    parents[pid], cpu[pid], reaped[pid] = parent, own + children, children
        processes: dict[int, tuple[tuple[str, ...], float]] = {}
        if me in cpu:
            processes[me] = (("driver Python",), cpu[me])
        for pid, spent in cpu.items():
            if pid == me:
                continue
            ancestor, hops = parents.get(pid, 0), 0
            while ancestor not in (0, 1, me) and hops < 16:
                ancestor, hops = parents.get(ancestor, 0), hops + 1
            cmd = _cmdline(pid)
            # The services first: a benchmark that started the local stack is their parent.
            if _server_on(cmd, sink_port):
                processes[pid] = (("sink",), spent)
            elif f"--kafka-port {kafka_port}" in cmd or f"port={kafka_port}" in cmd:
                processes[pid] = (("broker",), spent)
            elif any(_server_on(cmd, port) for port in source_ports):
                processes[pid] = (("source",), spent)
            elif ancestor == me and "tests.faults.proxy" in cmd:
                processes[pid] = (("sink proxy",), spent)
            elif ancestor == me and " reader run" in cmd:
                processes[pid] = (("reader",), spent)
            elif ancestor == me and "zookeeper" not in cmd.lower():
                program = cmd.split(" ")[0]
                if "java" in program:
                    # The JVM's children are the PySpark daemons: one that ended (Spark
                    # starts some per batch to plan the Python data source's reads) is
                    # reaped by the JVM, and its CPU is theirs, not the JVM's (stored
                    # under the negative pid: a process of its own to `minus`).
                    processes[pid] = (("JVM",), spent - reaped[pid])
                    processes[-pid] = (("Python workers", PLANNING), reaped[pid])
                elif "python" in program:
                    planning = "pyspark.worker" not in cmd
                    kinds = ("Python workers", PLANNING) if planning else ("Python workers",)
                    processes[pid] = (kinds, spent)
        return CpuSample(_by_kind(processes.values()), processes)

    def minus(self, before: CpuSample) -> CpuSample:
        """What each process still alive spent since `before` (one that started since counts
        whole)."""
        delta = {
            pid: (kinds, spent - before.processes.get(pid, (kinds, 0.0))[1])
            for pid, (kinds, spent) in self.processes.items()
        }
        return CpuSample(_by_kind(delta.values()), delta)


def _server_on(cmd: str, port: int) -> bool:
    """Whether `cmd` is a MariaDB/MySQL server listening on `port`."""
    return f"--port={port}" in cmd and ("mariadbd" in cmd or "mysqld" in cmd)


def _by_kind(processes: Iterable[tuple[tuple[str, ...], float]]) -> dict[str, float]:
    out = dict.fromkeys((*KINDS, PLANNING, *OTHERS), 0.0)
    for kinds, spent in processes:
        for kind in kinds:
            out[kind] += spent
    return out


def per_row(label: str, spent: CpuSample, rows: int) -> str:
    """One line per kind: ``cpu per row: <process> <µs>``, and the job's processes together."""
    if rows <= 0:
        return f"{label}: no rows applied in the window"
    lines = [
        f"{label} cpu per row: {kind} {spent.seconds[kind] / rows * 1e6:.1f} µs "
        f"({spent.seconds[kind]:.2f} s)"
        for kind in KINDS
    ]
    planning = spent.seconds.get(PLANNING, 0.0)
    lines.append(
        f"{label} cpu per row: {PLANNING} {planning / rows * 1e6:.1f} µs ({planning:.2f} s)"
    )
    job = sum(spent.seconds[k] for k in ("driver Python", "JVM", "Python workers"))
    lines.append(f"{label} cpu per row: job processes together {job / rows * 1e6:.1f} µs")
    return "\n".join(lines)


def cores(label: str, spent: CpuSample, seconds: float) -> str:
    """One line: the cores each kind of process used over a window of `seconds`, and all of
    them together against the machine's (what shows a rate the machine could not offer)."""
    kinds = [k for k in (*KINDS, *OTHERS) if spent.seconds.get(k, 0.0) > 0]
    used = sum(spent.seconds[k] for k in kinds)
    return (
        f"{label} cores used over {seconds:.0f}s: "
        + ", ".join(f"{k} {spent.seconds[k] / seconds:.2f}" for k in kinds)
        + f"; together {used / seconds:.2f} of {os.cpu_count()}"
    )
