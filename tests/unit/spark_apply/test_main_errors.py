"""The Spark job's last line names our error and its message, not a line of its trace."""

from __future__ import annotations

from rowbus.spark_apply.__main__ import _apply_error_in

# What py4j hands back when foreachBatch raised: the Python trace, chained causes included.
_PY4J = """An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/x/rowbus/spark_apply/sink.py", line 660, in _try_one
    cur.execute("SAVEPOINT one")
pymysql.err.ProgrammingError: (1146, "Table 'probe.seed' doesn't exist")

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/rowbus/spark_apply/sink.py", line 660, in _try_one
    raise BadEventError(f"{reason} {one.target}: {exc}", env.position) from exc
rowbus.spark_apply.exceptions.BadEventError: t[1]@2 (binlog b.000001:1231): missing target table probe.seed
"""


def test_the_error_line_is_the_exception_not_the_raise_statement() -> None:
    assert _apply_error_in(RuntimeError(_PY4J)) == (
        "BadEventError: t[1]@2 (binlog b.000001:1231): missing target table probe.seed"
    )


def test_other_failures_are_left_to_the_generic_line() -> None:
    assert _apply_error_in(RuntimeError("java.lang.OutOfMemoryError: heap")) is None


def test_a_python_failure_in_a_batch_is_named_by_its_exception() -> None:
    from rowbus.spark_apply.__main__ import one_line

    text = (
        "[STREAM_FAILED] Query terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
        "Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most "
        'recent call last):\n  File "x.py", line 1, in f\n    conn.query(sql)\n'
        "pymysql.err.OperationalError: (1153, \"Got a packet bigger than 'max_allowed_packet'\")\n"
    )
    assert one_line(RuntimeError(text)) == (
        "OperationalError: (1153, \"Got a packet bigger than 'max_allowed_packet'\")"
    )


def test_a_plain_apply_error_reads_the_same_from_spark_as_from_the_driver() -> None:
    """Throughput mode's executors raise the denial inside Spark's task; the driver's thread
    raises the same `ApplyError` itself: one line either way, without the class name."""
    from rowbus.spark_apply.__main__ import stop_line
    from rowbus.spark_apply.exceptions import ApplyError

    message = "writing rows: access denied (INSERT command denied); grant it to the sink's user"
    spark = RuntimeError(
        "Job aborted due to stage failure: Traceback (most recent call last):\n"
        '  File "/x/rowbus/spark_apply/throughput.py", line 1, in write\n'
        "    raise apply_error(exc, what) from exc\n"
        f"rowbus.spark_apply.exceptions.ApplyError: {message}\n"
    )
    driver = ApplyError(message)
    assert _apply_error_in(spark) == stop_line(type(driver).__name__, str(driver)) == message
    assert stop_line("BadEventError", "t[0]@1: x") == "BadEventError: t[0]@1: x"
