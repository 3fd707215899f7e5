"""``python -m rowbus.spark_apply --config job.json``, or ``spark-submit …/__main__.py …``.

The JSON file is a `JobConfig` (``rowbus apply`` writes one from rowbus' configuration, its
secrets handed over in the environment: `JobConfig.at_rest`). Exit status: 0 when an
``available_now`` run has caught up, 2 when an event cannot be applied or a record of a data
topic cannot be read (the message names its position and the reason), the sink refuses the
job's login or has no room for a write, or the file holds a masked secret, 1 on any other
failure (a sink that stayed away longer than ``apply.sink_retry_s`` among them). Every failure
ends with one line, ``apply stopped: …`` in one form wherever the error was raised
(`stop_line`); ``-v`` adds the trace and keeps Spark's own (verbose) log profile.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from rowbus.protocol.errors import ProtocolError
from rowbus.spark_apply.exceptions import ApplyError, SinkUnavailableError
from rowbus.spark_apply.settings import JobConfig, launched_by_spark_submit


def main(argv: list[str] | None = None) -> int:
    # A native crash leaves the driver's stacks in its log (the process's own stderr).
    faulthandler.enable(file=sys.__stderr__ or sys.stderr)
    parser = argparse.ArgumentParser(prog="python -m rowbus.spark_apply", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="a JobConfig JSON file")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="traces of failures, Spark's full log"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if not args.verbose:
        # A failing batch comes back to `run` and ends in one line below; py4j would log its
        # whole Python trace first.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        # The same trace, logged by the applier itself (`job.trace_log`).
        logging.getLogger("rowbus.spark_apply.job.trace").setLevel(logging.CRITICAL)
        logging.getLogger().addFilter(_py4j_module_log)
    try:
        # The secrets a launcher handed over in the environment are taken out of it here,
        # before Spark's JVM (which would pass them on to every Python worker) starts.
        config = JobConfig.load(args.config.read_text(), str(args.config), os.environ)
    except ApplyError as exc:
        logging.getLogger("rowbus.spark_apply").error("apply stopped: %s", exc)
        return 2
    _prepare_jvm(config, args.verbose)
    from rowbus.spark_apply.job import run, spark_started

    stopped: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        # Unwinds `run`, whose finally stops the query and the Spark session; a batch cut
        # short is not committed and runs again on restart (exactly once in the sink).
        if stopped:
            return
        stopped.append(signum)
        if not spark_started.is_set():
            _bound_start_up_stop(signum)
        raise JobStopped(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return _run(run, config, stopped, args.verbose)
    finally:
        if stopped:
            # A JVM still starting when the stop came is ours alone to end: it answers
            # nothing until it is up, and then only notices its driver gone.
            _end_children(START_UP_STOP_S)


def _py4j_module_log(record: logging.LogRecord) -> bool:
    """False for what py4j logs with the module-level `logging.exception` (on the root
    logger): a call whose connection broke, as a whole trace, before the caller gets the same
    error, which `_run` says in one line (a stop during Spark's start-up printed 20 lines)."""
    return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)


def _run(
    run: Callable[[JobConfig], None], config: JobConfig, stopped: list[int], verbose: bool
) -> int:
    """`run` with its failures turned into the exit status and one line."""
    try:
        run(config)
    except JobStopped as exc:
        logging.getLogger("rowbus.spark_apply").warning("apply stopped by signal %d", exc.signum)
        return 128 + exc.signum
    except SinkUnavailableError as exc:  # not the event's fault: the sink stayed away
        logging.getLogger("rowbus.spark_apply").error("apply failed: %s", exc)
        return 1
    except (ApplyError, ProtocolError) as exc:  # ProtocolError: a record read on the driver
        logging.getLogger("rowbus.spark_apply").error(
            "apply stopped: %s", stop_line(type(exc).__name__, str(exc))
        )
        return 2
    except Exception as exc:
        if stopped:  # the stop interrupted a call into Spark mid-way
            logging.getLogger("rowbus.spark_apply").warning(
                "apply stopped by signal %d (%s)", stopped[0], type(exc).__name__
            )
            return 128 + stopped[0]
        cause = _apply_error_in(exc)
        if cause is not None:
            logging.getLogger("rowbus.spark_apply").error("apply stopped: %s", cause)
            return 2
        if verbose:
            logging.getLogger("rowbus.spark_apply").exception("apply failed")
        logging.getLogger("rowbus.spark_apply").error(
            "apply failed: %s%s", one_line(exc), "" if verbose else " (-v for the trace)"
        )
        return 1
    return 0


START_UP_STOP_S = 5.0
"""How long a stop that comes while Spark starts may take before the driver kills its JVM and
exits: there is no query to finish yet, and Spark ignores the stop until it is up (under load,
a minute and more), so a job whose parent died with it stayed running that long (issue #33)."""


def _bound_start_up_stop(signum: int) -> None:
    """Arm a watchdog: if the driver has not exited `START_UP_STOP_S` after a stop that came
    during Spark's start-up (blocked in a call the JVM answers only once up), its children are
    killed and it exits with the signal's status."""

    def expire() -> None:
        logging.getLogger("rowbus.spark_apply").warning(
            "apply stopped by signal %d while Spark was starting: its JVM is killed", signum
        )
        _end_children(0.0)
        os._exit(128 + signum)

    timer = threading.Timer(START_UP_STOP_S, expire)
    timer.daemon = True
    timer.start()


def _children() -> list[int]:
    """This process's live children (its JVM and the launcher's processes)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == me and fields[0] not in {"Z", "X"}:
                    found.append(int(entry.name))
    return found


def _end_children(grace_s: float) -> None:
    """TERM this process's children, KILL those left after `grace_s` (bounded: one pass each,
    then at most `grace_s` of polling)."""
    children = _children()
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = children
    while left and time.monotonic() < deadline:
        threading.Event().wait(0.05)
        left = [pid for pid in left if pid in _children()]
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _prepare_jvm(config: JobConfig, verbose: bool) -> None:
    """Settings for the JVM this process is about to launch (none under spark-submit, whose
    JVM already runs and whose launcher chose its own)."""
    if launched_by_spark_submit():
        return
    if not verbose and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        quiet = Path(__file__).with_name("log4j2-quiet.properties")
        options = f"-Dlog4j2.configurationFile=file:{quiet}"
        log = spark_log(config)
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # Spark's own failure with the checkpoint folder says why, in one line
        else:
            options += f" -Drowbus.spark.log={log}"
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--driver-java-options {shlex.quote(options)} pyspark-shell"
        )


def spark_log(config: JobConfig) -> Path:
    """Where the quiet profile keeps Spark's whole log, traces included: beside the checkpoint
    folder, so each job has its own."""
    where = config.apply.checkpoint_location
    return where.with_name(f"{where.name}.spark.log")


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Warning|Exit)\b[^ ]*: ")


def one_line(exc: BaseException) -> str:
    """A Spark or py4j failure as one line: the innermost JVM exception's class and message
    when there is one (py4j puts it on the line after its own), else the first line."""
    raw = str(exc).splitlines()
    lines = [ln.strip() for ln in raw if ln.strip()]
    if any("Traceback (most recent call last)" in ln for ln in lines):
        # Python code failed inside a batch: its exception is the trace's last unindented
        # "Name: message" line.
        said = [ln.strip() for ln in raw if _EXCEPTION_LINE.match(ln)]
        if said:
            head, _, message = said[-1].partition(": ")
            return f"{head.rsplit('.', 1)[-1]}: {message}"[:500]
    java = next((ln for ln in lines if ln.startswith(": ")), None)
    if java is not None:
        head, _, message = java[2:].partition(": ")
        return f"{head.rsplit('.', 1)[-1]}: {message}"[:500]
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first}"[:500]


class JobStopped(Exception):  # noqa: N818 - a stop request, not a failure
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _apply_error_in(exc: BaseException) -> str | None:
    """Spark wraps a foreachBatch failure in its own exception; find ours in the message and
    say it as `stop_line` does for the same error raised in the driver's own thread."""
    text = str(exc)
    for name in (*_NAMED[:-1], "SinkFullError", "ApplyError", "ProtocolError"):
        # The traceback's last "…Error: message" line, not a source line naming the class.
        said = re.compile(rf"^(?:[\w.]+\.)?{name}: ")
        found = [ln.strip() for ln in text.splitlines() if said.match(ln.strip())]
        if found:
            return stop_line(name, found[-1].partition(": ")[2])
    return None


_NAMED = (
    "BadEventError",
    "CheckpointConflictError",
    "MissingTopicError",
    "LogChangedError",
    "ProtocolError",
)
"""The errors a stop names: each name says which kind of trouble it is (an event, the
checkpoints, a topic, the broker's log, a record) and operators' tools match on it."""


def stop_line(name: str, message: str) -> str:
    """What follows ``apply stopped: `` for error class `name`: ``Name: message`` for the
    kinds in `_NAMED`, the message alone for a plain `ApplyError` (its name says nothing its
    message does not). One form wherever the error was raised: in the driver's own thread,
    or inside a batch and handed back by Spark — an executor's task in throughput mode — so
    the same denial reads the same in every mode (issue #33)."""
    return f"{name}: {message}" if name in _NAMED else message


if __name__ == "__main__":
    sys.exit(main())
