"""The job sets no master when spark-submit chose one; `apply.master` otherwise.

spark-submit runs a Python driver as a child of its JVM and passes it the gateway in
``PYSPARK_GATEWAY_PORT``; `tests/e2e/test_spark_standalone.py` shows it on a real cluster."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from rowbus.spark_apply import job
from rowbus.spark_apply.settings import ApplySettings, JobConfig


class _Builder:
    def __init__(self) -> None:
        self.calls: dict[str, Any] = {}

    def master(self, value: str) -> _Builder:
        self.calls["master"] = value
        return self

    def appName(self, value: str) -> _Builder:
        self.calls["app"] = value
        return self

    def config(self, key: str, value: str) -> _Builder:
        self.calls[key] = value
        return self

    def getOrCreate(self) -> dict[str, Any]:
        return self.calls


@pytest.mark.parametrize(("submitted", "expected"), [(True, None), (False, "local[1]")])
def test_the_master_is_left_to_spark_submit(
    monkeypatch: pytest.MonkeyPatch, submitted: bool, expected: str | None
) -> None:
    builder = _Builder()
    monkeypatch.setattr(SparkSession, "builder", builder)
    if submitted:
        monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    else:
        monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    calls = job.spark_session(JobConfig(apply=ApplySettings(master="local[1]")))
    assert calls.get("master") == expected
    assert calls["app"] == "rowbus-apply-rowbus-apply"
