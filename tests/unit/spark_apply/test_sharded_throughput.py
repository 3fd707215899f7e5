"""A throughput-mode job with a sharded route says, as it starts, that its batches all take the
driver's path (shard-DDL coordination), instead of only counting fallbacks batch after batch."""

from __future__ import annotations

import logging

import pytest

from rowbus.routing.routes import RouteSettings
from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.job import SHARDED_THROUGHPUT, shard_ddl_hook
from rowbus.spark_apply.settings import ApplySettings, JobConfig

SHARDED = RouteSettings(match="shop_*.orders", target="shop.orders", sharded=True)


@pytest.mark.parametrize(("mode", "warned"), [("throughput", True), ("snapshot", False)])
def test_a_sharded_route_in_throughput_mode_is_reported_at_start(
    caplog: pytest.LogCaptureFixture, mode: str, warned: bool
) -> None:
    config = JobConfig(apply=ApplySettings(mode=mode, routes=(SHARDED,)))
    with caplog.at_level(logging.WARNING, "rowbus.spark_apply.job"), pytest.raises(ApplyError):
        shard_ddl_hook(config)  # no shard tables listed: refused after the warning
    assert (SHARDED_THROUGHPUT in caplog.messages) is warned


def test_an_unsharded_throughput_job_is_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    plain = RouteSettings(match="shop.*", target="copy.{table}")
    config = JobConfig(apply=ApplySettings(mode="throughput", routes=(plain,)))
    with caplog.at_level(logging.WARNING, "rowbus.spark_apply.job"):
        assert shard_ddl_hook(config) is None
    assert not caplog.messages
