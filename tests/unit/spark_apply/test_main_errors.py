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
