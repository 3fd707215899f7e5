"""The conformance kit (PROTOCOL.md §10) passes against rowbus's own decoder and merger, and
fails on a deliberately broken merger and decoder, naming what differs."""

from __future__ import annotations

import sys

from rowbus.protocol.conformance import STREAMS, main, run

REFERENCE = [sys.executable, "-m", "rowbus.merge.conformance"]
BROKEN = [sys.executable, "-m", "tests.unit.protocol.broken_program"]


def test_the_reference_passes_every_vector() -> None:
    report = run(REFERENCE)
    assert report.failures == []
    streams = len(list(STREAMS.glob("*.json")))
    assert streams >= 10
    assert report.checked >= 50 + streams


def test_a_merger_that_keeps_replayed_records_fails_the_stream_vectors() -> None:
    report = run([*BROKEN, "merge"], ["streams"])
    assert report.failures, "the kit passed a merger that never drops a replay"
    assert all(f.startswith("stream_") for f in report.failures)
    assert "the first difference at #" in report.failures[0]


def test_a_decoder_that_forgets_a_field_fails_the_record_vectors(capsys: object) -> None:
    assert main(["--only", "records", "--", *BROKEN, "decode"]) == 1
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "FAIL ddl.pb: decoded" in out and "FAIL ddl.json: decoded" in out
    assert out.strip().endswith("failed") and " 0 failed" not in out
