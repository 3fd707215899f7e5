"""What Spark is handed when a batch fails (`exceptions.BatchFailure`): one bounded line that
the job's command and `recovery.retryable` still read as before (issue #33: Spark's per-character
regex over a whole trace overflowed its stream thread's stack)."""

from __future__ import annotations

import traceback

import pymysql

from rowbus.spark_apply.__main__ import _apply_error_in, one_line
from rowbus.spark_apply.exceptions import BadEventError, BatchFailure, SinkUnavailableError
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
