"""Fixtures for reader tests: a `ReaderSetup` with unique names for every test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rowbus.config import Settings
from tests.integration.producer.helpers import ReaderSetup


@pytest.fixture
def make_reader_setup(
    services: Settings,
    make_topic: Callable[..., str],
    make_database: Callable[..., str],
    unique: Callable[[str], str],
) -> Callable[..., ReaderSetup]:
    """`make_reader_setup(partitions=3)`: a reader of the first source with a fresh database,
    data topic (`partitions`) and compacted checkpoint and schema topics."""

    def make(partitions: int = 3) -> ReaderSetup:
        server = services.sources[0]
        compact = {"cleanup.policy": "compact"}
        return ReaderSetup(
            services=services,
            server=server,
            source=unique("src"),
            database=make_database(server),
            data_topic=make_topic("data", partitions=partitions),
            checkpoints_topic=make_topic("ckpt", partitions=1, **compact),
            schemas_topic=make_topic("schemas", partitions=1, **compact),
        )

    return make


@pytest.fixture
def reader_setup(make_reader_setup: Callable[..., ReaderSetup]) -> ReaderSetup:
    return make_reader_setup()
