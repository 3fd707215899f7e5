"""Errors of the apply job, under `rowbus.protocol.errors.RowbusError`::

RowbusError
└── ApplyError                 an event cannot be applied; nothing of the batch is committed
    ├── BadEventError          one event cannot be applied (type mismatch, missing target
    │                          table or column, bad routing); names its position and reason
    ├── CheckpointConflictError the sink's checkpoint is not the one this batch builds on
    ├── LogChangedError        a partition no longer holds records the job read (a broker that
    │                          lost acknowledged records and reused their offsets)
    ├── MissingTopicError      a data topic the job reads does not exist (not created yet, or
    │                          deleted under the running job)
    ├── SinkFullError          the sink has no room for a write (a full disk, a capped
    │                          tablespace): nothing of the batch is committed; not retried
    ├── SinkUnavailableError   the sink cannot be reached (retryable)
    └── TransactionConflictError the sink rolled a transaction back: deadlock or lock wait
                               timeout (retryable; the sink retries it itself first)

BatchFailure (an Exception, not a RowbusError) is how a failed batch reaches Spark: its
cause's name and message on one bounded line of its own.
"""

from __future__ import annotations

import re

from rowbus.protocol.errors import RowbusError


class ApplyError(RowbusError):
    """The apply job cannot go on."""


class BadEventError(ApplyError):
    """One event cannot be applied; `position` says where it is (Kafka and binlog)."""

    def __init__(self, reason: str, position: str) -> None:
        self.reason = reason
        self.position = position
        super().__init__(f"{position}: {reason}")


class CheckpointConflictError(ApplyError):
    """The batch does not build on the checkpoint the sink holds (another driver, or a Spark
    checkpoint that does not belong to this sink)."""


class LogChangedError(ApplyError):
    """Records the job already read at `offset` of ``topic[partition]`` (below `end`, where its
    next range starts) are gone or replaced: reading on would skip what the broker now holds
    there (`boundaries`)."""

    def __init__(self, topic: str, partition: int, offset: int, end: int, what: str) -> None:
        self.topic, self.partition, self.offset, self.end = topic, partition, offset, end
        super().__init__(
            f"{topic}[{partition}]@{offset}: the record the job read there {what} (the job has "
            f"read to {end}): the broker lost acknowledged records and reused their offsets, "
            "so the job stops rather than skip what is there now; run `rowbus verify` and "
            'rebuild what differs (docs/operations.md, "A broker that loses records")'
        )


class MissingTopicError(ApplyError):
    """A data topic the job reads does not exist on the broker."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"the data topic {topic} does not exist: start the reader of its source (it creates "
            "the topic), or check apply.sources and apply.topic_template"
        )


class SinkFullError(ApplyError):
    """The sink refused a write for want of space (`rowbus.clients.mysql.Kind.FULL`). The
    transaction it was part of is rolled back, so the job stops rather than wait: space comes
    back only when an operator frees it, and a restarted job resumes from the sink's head."""


class SinkUnavailableError(ApplyError):
    """The sink database cannot be reached."""

    retryable = True


class TransactionConflictError(ApplyError):
    """The sink rolled the transaction back (InnoDB deadlock 1213, lock wait timeout 1205); the
    whole transaction may run again."""

    retryable = True


class BatchFailure(Exception):  # noqa: N818 - a carrier of another failure, named by it
    """A foreachBatch failure as Spark is handed it: ``Name: message`` of `cause` on one line
    of its own (after a line break, so the last line of the trace py4j passes to Spark starts
    with the cause's name, as `recovery.retryable` and the job's command parse it), at most
    `LIMIT` characters. Spark runs a regex that recurses per character over this text when the
    query is stopped mid-batch: a whole trace overflowed its thread's stack."""

    LIMIT = 1000

    def __init__(self, cause: BaseException) -> None:
        line = _failure_line(cause)
        if len(line) > self.LIMIT:
            line = line[: self.LIMIT - 1] + "…"
        stop = interrupted_by_stop(cause)
        # A call into Spark interrupted by the query's stop keeps the two lines by which Spark
        # tells a stop's interruption from a failure: it then ends the query quietly instead of
        # logging it as terminated with an error, with its whole trace.
        super().__init__(f"\n{stop}" if stop else f"\n{line}")
        self.line = line
        self.interrupted = stop is not None


_STOP_INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


def interrupted_by_stop(cause: BaseException) -> str | None:
    """For a call into Spark that the query's stop interrupted (py4j's error, the Java side
    an interruption), the text Spark's stream execution recognises as such (``py4j.protocol.
    Py4JJavaError: An error occurred while calling …`` then ``: java.lang.Interrupted…`` on a
    line of its own); None for any other failure."""
    if type(cause).__name__ != "Py4JJavaError":
        return None
    head, _, rest = str(cause).partition("\n")
    for name in _STOP_INTERRUPTIONS:
        if rest.startswith(f": {name}"):
            return f"py4j.protocol.Py4JJavaError: {head.strip()}\n: {name}"
    if _CANCELLED_BY_STOP.search(rest):  # the stop cancelled the batch's job instead
        return (
            f"py4j.protocol.Py4JJavaError: {head.strip()}\n: {_STOP_INTERRUPTIONS[0]} "
            "(the query was stopped: its job was cancelled)"
        )
    return None


_CANCELLED_BY_STOP = re.compile(r"\[SPARK_JOB_CANCELLED\] Job \d+ cancelled Query .* was stopped")


_OURS = (
    "BadEventError",
    "CheckpointConflictError",
    "MissingTopicError",
    "LogChangedError",
    "SinkFullError",
    "SinkUnavailableError",
    "TransactionConflictError",
    "ApplyError",
    "ProtocolError",
)
_NAMED_LINE = re.compile(r"^(?:[\w.]+\.)?([A-Za-z_]\w*(?:Error|Exception)): (.*)$")


def _failure_line(cause: BaseException) -> str:
    """The line that says what failed. A failure of Spark's own call (py4j's error, a read on
    the executors) carries the Python and Java traces in its text: the last line naming one of
    ours decides, else the last ``Name: message`` line of a Python trace; else the cause."""
    text = str(cause)
    if "\n" in text:
        named = [m for ln in text.splitlines() if (m := _NAMED_LINE.match(ln.strip()))]
        for group in (
            [m for m in named if m.group(1) in _OURS],
            named if "Traceback (most recent call last)" in text else [],
        ):
            if group:
                return f"{group[-1].group(1)}: {group[-1].group(2).strip()}"
    return f"{type(cause).__name__}: {' '.join(text.split())}"
