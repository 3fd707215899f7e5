"""Fixtures for reader tests: a `ReaderSetup` with unique names for every test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rowbus.config import Settings
from tests.integration.producer.helpers import ReaderSetup


@pytest.fixture
def reader_setup(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> ReaderSetup:
    server = services.sources[0]
    return ReaderSetup(
        services=services,
        server=server,
        source=unique("src"),
        database=make_database(server),
        data_topic=make_topic("data", partitions=3),
        checkpoints_topic=make_topic("ckpt", partitions=1, **{"cleanup.policy": "compact"}),
        schemas_topic=make_topic("schemas", partitions=1, **{"cleanup.policy": "compact"}),
    )
