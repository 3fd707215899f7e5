"""A class-data-sharing archive for the Spark JVMs that tests start.

Most of a Spark driver JVM's start is loading and verifying Spark's classes. A CDS archive maps
them in ready-made: measured here for one driver (session, one query, stop), 8.1 CPU seconds of
the process tree without it against 3.8 with it, twice each, and 40 against 11-14 s of wall
clock at load ~20. The suite starts a few dozen drivers (the kill -9 tests alone start 12).

The archive is made once per checkout, in the background while the first tests run (`Archive`,
from conftest; 24 CPU seconds here): a short Spark session run with ``-XX:ArchiveClassesAtExit``,
written to a temporary name and renamed once its JVM has exited, so no JVM reads half an
archive. It is valid only for this JVM and this exact
class path (the venv's absolute pyspark jar paths): its name carries a digest of both, so a new
pyspark or JDK makes a new one. A JVM that cannot use it (a class path that differs, an
archive from another JVM) runs as without it; its CDS log lines are off, so no process output
changes. What a test checks is the same code: only where the JVM finds Spark's classes differs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

_SESSION = """
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.driver.host", "127.0.0.1")
    .getOrCreate()
)
spark.range(1000).selectExpr("sum(id)").collect()
spark.stop()
"""
QUIET = "-Xlog:cds*=off"
"""A JVM that cannot map the archive says so on stdout otherwise."""
DUMP_TIMEOUT_S = 300.0


def _key(jvm_options: str) -> str | None:
    """A digest of what the archive depends on, or None without pyspark or java."""
    java = shutil.which("java")
    # Found, not imported: this runs in a thread while the main thread collects test modules
    # that import pyspark.sql, and two threads importing pyspark at once failed a clean-clone
    # run's collection ("cannot import name 'SQLContext' from partially initialized module").
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None or java is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    digest = hashlib.sha256(jvm_options.encode())
    for path in [Path(java).resolve(), *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


class Archive:
    """The archive of one checkout, made in a background thread if missing: `options()` is
    None until it is ready, then the JVM options that map it; `close()` stops a making that
    is still running (with its JVM), so the session leaves no process behind."""

    def __init__(self, folder: Path, jvm_options: str) -> None:
        self._folder, self._jvm_options = folder, jvm_options
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = threading.Event()
        self._result: str | None = None
        self._thread = threading.Thread(target=self._make, name="spark-cds", daemon=True)
        self._thread.start()

    def options(self) -> str | None:
        return None if self._thread.is_alive() else self._result

    def close(self) -> None:
        self._closed.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the session's Python and its JVM
        self._thread.join(30)

    def _make(self) -> None:
        key = _key(self._jvm_options)
        if key is None:
            return
        folder = self._folder
        archive = folder / f"spark-{key}.jsa"
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / ".making").open("w") as making:
            # One process of a run makes it (the two pytest-xdist workers start together);
            # the other waits for it, as the tests before it is ready run without it.
            while not self._closed.is_set():
                try:
                    fcntl.flock(making, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    self._closed.wait(0.5)
            else:
                return
            self._make_locked(archive, key)

    def _make_locked(self, archive: Path, key: str) -> None:
        folder = self._folder
        if not archive.exists():
            started = time.monotonic()
            if not self._dump(folder / f".spark-{key}.{os.getpid()}.jsa", archive):
                return
            log.info("Spark CDS archive %s made in %.1f s", archive, time.monotonic() - started)
            for old in folder.glob("spark-*.jsa"):  # archives of an earlier pyspark or JDK
                if old != archive:
                    with contextlib.suppress(OSError):
                        old.unlink()
        self._result = f"-XX:SharedArchiveFile={archive} {QUIET}"

    def _dump(self, partial: Path, archive: Path) -> bool:
        partial.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{self._jvm_options} -XX:ArchiveClassesAtExit={partial} {QUIET}",
            "PYSPARK_PYTHON": sys.executable,
        }
        if self._closed.is_set():
            return False
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SESSION],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # The JVM writes the archive as it exits, after the Python process: the archive is
        # whole once no process of the session is left.
        deadline = time.monotonic() + DUMP_TIMEOUT_S
        while time.monotonic() < deadline and not self._closed.is_set():
            if self._proc.poll() is not None and not session_alive(self._proc.pid):
                break
            self._closed.wait(0.5)
        else:
            self.close_quietly(partial)
            return False
        if self._proc.returncode != 0 or not partial.exists():
            log.warning("no Spark CDS archive: its session ended with %s", self._proc.returncode)
            partial.unlink(missing_ok=True)
            return False
        partial.replace(archive)
        return True

    def close_quietly(self, partial: Path) -> None:
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        partial.unlink(missing_ok=True)


def session_alive(session: int) -> bool:
    """Whether a process of `session` is still running."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (proc / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[3]) == session:
                    return True
    return False
