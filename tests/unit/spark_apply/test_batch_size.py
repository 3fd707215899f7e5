"""Throughput mode's batch is larger where `max_offsets_per_trigger` is not set: its driver holds
no rows, and each batch costs its Spark jobs and tasks about a second of CPU (spark_apply README
"Batch size in throughput mode"); a value the user set, null (no limit) included, is kept, and
a sharded route (every batch on the driver's path) keeps the driver's batch."""

from __future__ import annotations

import pytest

from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.settings import THROUGHPUT_BATCH, ApplySettings, JobConfig


@pytest.mark.parametrize(
    ("mode", "expected"), [("snapshot", 50_000), ("parallel", 50_000), ("throughput", 200_000)]
)
def test_the_batch_size_left_unset_is_the_modes(mode: str, expected: int) -> None:
    assert ApplySettings.model_validate({"mode": mode}).max_offsets_per_trigger == expected
    assert THROUGHPUT_BATCH == 200_000


@pytest.mark.parametrize("given", [None, 1, 50_000, 1_000_000])
def test_a_batch_size_set_is_kept_in_throughput_mode(given: int | None) -> None:
    a = ApplySettings.model_validate({"mode": "throughput", "max_offsets_per_trigger": given})
    assert a.max_offsets_per_trigger == given


def test_the_job_reads_back_the_size_its_shell_decided() -> None:
    """The shell hands the job its configuration as JSON: the size is written there whole."""
    config = JobConfig(apply=ApplySettings(mode="throughput"))
    again = JobConfig.model_validate_json(config.model_dump_json())
    assert again.apply.max_offsets_per_trigger == THROUGHPUT_BATCH
    explicit = JobConfig(apply=ApplySettings(mode="throughput", max_offsets_per_trigger=None))
    assert JobConfig.model_validate_json(explicit.model_dump_json()).apply == explicit.apply


def test_a_sharded_route_keeps_the_drivers_batch_in_throughput_mode() -> None:
    sharded = RouteSettings(match="shop_*.orders", target="shop.orders", sharded=True)
    a = ApplySettings.model_validate({"mode": "throughput", "routes": [sharded]})
    assert a.max_offsets_per_trigger == 50_000
    plain = RouteSettings(match="shop.*", target="copy.{table}")
    a = ApplySettings.model_validate({"mode": "throughput", "routes": [plain]})
    assert a.max_offsets_per_trigger == THROUGHPUT_BATCH
