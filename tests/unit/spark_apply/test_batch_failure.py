"""What Spark is handed when a batch fails (`exceptions.BatchFailure`): one bounded line that
the job's command and `recovery.retryable` still read as before (issue #33: Spark's per-character
regex over a whole trace overflowed its stream thread's stack)."""

from __future__ import annotations

import logging
import re
import traceback

import pymysql
import pytest

from rowbus.spark_apply.__main__ import _apply_error_in, one_line
from rowbus.spark_apply.exceptions import (
    BadEventError,
    BatchFailure,
    SinkUnavailableError,
    interrupted_by_stop,
)
from rowbus.spark_apply.job import _not_a_stop
from rowbus.spark_apply.recovery import retryable


def _as_spark_gets_it(cause: BaseException) -> RuntimeError:
    """The applier's raise as py4j formats it for Spark (`traceback.format_exc`), wrapped in
    the text of Spark's own exception."""
    try:
        try:
            raise cause
        except Exception as exc:
            raise BatchFailure(exc) from None
    except BatchFailure:
        trace = traceback.format_exc()
    return RuntimeError(f"An exception was raised by the Python Proxy. Return Message: {trace}")


def test_a_huge_message_is_cut_to_one_bounded_line_still_named() -> None:
    spark = _as_spark_gets_it(BadEventError("x" * 200_000, "t[0]@7"))
    assert len(str(spark)) < 2 * BatchFailure.LIMIT
    said = _apply_error_in(spark)
    assert said is not None and said.startswith("BadEventError: t[0]@7: xxx")
    assert said.endswith("…") and len(said) == BatchFailure.LIMIT
    assert one_line(spark).startswith("BadEventError: t[0]@7: xxx")


def test_a_retryable_failure_stays_retryable() -> None:
    spark = _as_spark_gets_it(SinkUnavailableError("sink 127.0.0.1:3306: connection refused"))
    assert retryable(spark) == "SinkUnavailableError: sink 127.0.0.1:3306: connection refused"
    dropped = _as_spark_gets_it(pymysql.err.OperationalError(2013, "Lost connection"))
    assert retryable(dropped) == "sink unavailable: OperationalError: (2013, 'Lost connection')"


def test_our_error_inside_a_failed_spark_call_names_the_line() -> None:
    """A read on the executors fails inside Spark's collect: py4j's error carries the worker's
    Python trace among Java's; the line is the error of ours, not the first Java line."""
    text = (
        "An error occurred while calling o81.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/rowbus/spark_apply/rendered.py", line 90, in decode\n'
        "rowbus.protocol.errors.ProtocolError: bad[0]@0: protobuf value is truncated\n"
        "\n\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:1)\n"
        + "\tat org.apache.spark.rdd.RDD.iterator(RDD.scala:1)\n"
        * 500
    )
    failure = BatchFailure(RuntimeError(text))
    assert failure.line == "ProtocolError: bad[0]@0: protobuf value is truncated"
    spark = _as_spark_gets_it(RuntimeError(text))
    assert _apply_error_in(spark) == "ProtocolError: bad[0]@0: protobuf value is truncated"


def test_a_multi_line_message_becomes_one_line() -> None:
    assert BatchFailure(ValueError("first\nsecond")).line == "ValueError: first second"


STOP = "java.lang.InterruptedException\n\tat java.base/java.util.concurrent.locks.X(X.java:1)"


class Py4JJavaError(Exception):
    """py4j's error as its text reads: the call, then the Java exception and its trace."""


# Spark's check for a stop's interruption in a foreachBatch failure (StreamExecution's regex
# over the Python proxy's message), as it reads in Spark 4.
SPARK_STOP = re.compile(
    r"py4j.protocol.Py4JJavaError: An error occurred while calling.+(\r\n|\r|\n): "
    r"(java.lang.InterruptedException|java.io.InterruptedIOException|"
    r"java.nio.channels.ClosedByInterruptException)"
)


@pytest.mark.parametrize(
    "java",
    [
        ": java.lang.InterruptedException\n\tat java.base/java.util.concurrent.locks.X(X.java:1)",
        ": org.apache.spark.SparkException: Exception thrown in awaitResult: \n\tat x\n"
        "Caused by: org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 22 cancelled "
        "Query rowbus_apply_job_f5 [id = 88a3, runId = 1a9f] was stopped SQLSTATE: XXKDA",
    ],
)
def test_a_call_the_query_stop_interrupted_reads_to_spark_as_a_stop(java: str) -> None:
    """Stopped mid-batch, the job's collect fails with the stop's interruption: Spark must see
    the two lines it tells a stop by, or it logs the query as terminated with an error (~70
    lines of trace at every stop of a running job)."""
    cause = Py4JJavaError(f"An error occurred while calling o457.getResult.\n{java}")
    assert interrupted_by_stop(cause)
    failure = BatchFailure(cause)
    assert failure.interrupted
    assert SPARK_STOP.search(str(_as_spark_gets_it(cause)))


def test_any_other_failure_does_not_read_as_a_stop() -> None:
    other = Py4JJavaError(
        "An error occurred while calling o81.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: boom"
    )
    for cause in (other, RuntimeError("java.lang.InterruptedException")):
        assert interrupted_by_stop(cause) is None
        assert not BatchFailure(cause).interrupted
        assert not SPARK_STOP.search(str(_as_spark_gets_it(cause)))


def test_py4j_s_report_of_a_stop_s_interruption_is_left_out_of_the_log() -> None:
    """py4j logs every failure of the foreachBatch proxy with its whole trace; the job says a
    stop's interruption in one line of its own, so py4j's record of it is dropped."""
    stop = BatchFailure(Py4JJavaError("An error occurred while calling o1.getResult.\n: " + STOP))
    other = BatchFailure(RuntimeError("boom"))

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("py4j.clientserver", 40, "x", 1, "m", (), (type(exc), exc, None))

    assert not _not_a_stop(record(stop))
    assert _not_a_stop(record(other))
    assert _not_a_stop(logging.LogRecord("py4j.clientserver", 40, "x", 1, "m", (), None))
