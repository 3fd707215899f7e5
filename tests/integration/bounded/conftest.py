"""Fixtures for the bounded-memory and checkpoint-safety tests (issue 14, points 4-5)."""

from __future__ import annotations

from tests.integration.producer.conftest import make_reader_setup, reader_setup

__all__ = ["make_reader_setup", "reader_setup"]
