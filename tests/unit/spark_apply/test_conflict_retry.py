"""A transaction the sink rolls back for a deadlock or lock wait timeout runs again, bounded."""

from __future__ import annotations

import pymysql
import pytest

from rowbus.spark_apply.exceptions import ApplyError, TransactionConflictError
from rowbus.spark_apply.sink_conn import CONFLICT_ATTEMPTS, db_errors, retry_conflicts


class FakeConn:
    def __init__(self) -> None:
        self.rollbacks = 0

    def rollback(self) -> None:
        self.rollbacks += 1


def test_a_conflict_runs_the_whole_transaction_again() -> None:
    conn = FakeConn()
    runs = []

    def transaction() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise TransactionConflictError("deadlock")

    retry_conflicts(conn, transaction, "batch 1")  # type: ignore[arg-type]
    assert len(runs) == 3
    assert conn.rollbacks == 2


def test_retries_are_bounded_and_the_error_is_retryable() -> None:
    conn = FakeConn()

    def transaction() -> None:
        raise TransactionConflictError("deadlock")

    with pytest.raises(TransactionConflictError) as err:
        retry_conflicts(conn, transaction, "batch 1")  # type: ignore[arg-type]
    assert err.value.retryable
    assert conn.rollbacks == CONFLICT_ATTEMPTS


@pytest.mark.parametrize("code", [1205, 1213])
def test_deadlock_and_lock_wait_timeout_are_conflicts(code: int) -> None:
    with pytest.raises(TransactionConflictError), db_errors("writing the checkpoint"):
        raise pymysql.err.OperationalError(code, "try restarting transaction")


def test_other_errors_are_not_retried() -> None:
    with pytest.raises(ApplyError) as err, db_errors("writing the checkpoint"):
        raise pymysql.err.OperationalError(1146, "no such table")
    assert not isinstance(err.value, TransactionConflictError)
