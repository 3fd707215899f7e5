"""The sink refuses a batch that does not continue what it holds, naming both positions and
what to do: Spark's checkpoint folder is not this sink's, or the topic's offsets started
over (a broker that came back without its data, a topic recreated)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rowbus.config import Settings
from rowbus.routing.routes import Router, RouteSettings
from rowbus.spark_apply.exceptions import CheckpointConflictError
from rowbus.spark_apply.planner import PlannerState
from rowbus.spark_apply.sink import MySQLSink
from tests.integration.spark_apply.test_sink import sink_connection

T = "rowbus.src"


def test_a_batch_below_what_the_sink_applied_is_refused_with_both_positions(
    services: Settings, make_database: Callable[..., str], unique: Callable[[str], str]
) -> None:
    db = make_database(services.resolved_sink)
    router = Router([RouteSettings(match="up.*", target=f"{db}.{{table}}")], unrouted="error")
    sink = MySQLSink(sink_connection(services), unique("job"), f"{db}_state", router, {}.get)
    with sink:
        held = PlannerState(offsets={(T, 0): 18140, (T, 1): 7})
        # Continuing exactly where the sink is, or a partition it never saw: accepted.
        sink.check_offsets(386, {(T, 0): (18140, 18200), (T, 2): (0, 5)}, held)
        with pytest.raises(CheckpointConflictError) as refused:
            sink.check_offsets(386, {(T, 0): (0, 99), (T, 1): (7, 9)}, held)
        text = str(refused.value)
        assert f"{T}[0]@0" in text and f"{T}[0]@18140" in text
        assert "checkpoint folder" in text and "lost records" in text and "apply.job" in text
        # A batch the sink never committed is no claim on a replay.
        sink.check_offsets(3, {(T, 0): (0, 99)}, None)
