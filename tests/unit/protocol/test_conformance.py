"""The conformance kit (PROTOCOL.md §10) passes against rowbus's own decoder and merger, and
fails on a deliberately broken merger, applier and decoder, naming what differs."""

from __future__ import annotations

import json
import sys

from rowbus.protocol.codec import Encoding
from rowbus.protocol.conformance import STREAMS, main, run
from tests.unit.protocol import named_streams

REFERENCE = [sys.executable, "-m", "rowbus.merge.conformance"]
BROKEN = [sys.executable, "-m", "tests.unit.protocol.broken_program"]


NAMED = (
    "fragments",
    "upstream_switch",
    "xa",
    "aborted_duplicates",
    "ddl_barriers",
    "incremental_refresh",
    "keyless_chunks",
)


def test_the_reference_passes_every_vector() -> None:
    report = run(REFERENCE)
    assert report.failures == []
    streams = len(list(STREAMS.glob("*.json")))
    named = {p.stem for p in STREAMS.glob("named_*.json")}
    assert named == {f"named_{n}" for n in NAMED}
    assert streams >= 10 + len(named)
    # each stream's order, and each named stream's final tables
    assert report.checked >= 50 + streams + len(named)


def test_a_merger_that_keeps_replayed_records_fails_the_stream_vectors() -> None:
    report = run([*BROKEN, "merge"], ["streams"])
    assert report.failures, "the kit passed a merger that never drops a replay"
    assert all(f.startswith(("stream_", "named_")) for f in report.failures)
    assert "the first difference at #" in report.failures[0]
    failed = {f.split(".json")[0] for f in report.failures}
    # replays after an XA restart, a leaked aborted transaction, copies of a broadcast DDL
    assert {"named_xa", "named_aborted_duplicates", "named_ddl_barriers"} <= failed


def test_a_merger_blind_to_upstream_switches_fails_the_switch_vector() -> None:
    report = run([*BROKEN, "upstream"], ["streams"])
    assert len(report.failures) == 1, report.failures
    assert report.failures[0].startswith("named_upstream_switch.json: 2 transactions released, 4")


def test_an_applier_that_ignores_snapshot_markers_fails_on_the_final_tables() -> None:
    report = run([*BROKEN, "markers"], ["streams"])
    assert len(report.failures) == 2, report.failures
    # a row the source lost kept; the first attempt's rows, read before the restart, doubled
    assert report.failures[0].startswith("named_incremental_refresh.json: table db.t holds")
    assert report.failures[1].startswith("named_keyless_chunks.json: table db.k holds")


def test_a_decoder_that_forgets_a_field_fails_the_record_vectors(capsys: object) -> None:
    assert main(["--only", "records", "--", *BROKEN, "decode"]) == 1
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "FAIL ddl.pb: decoded" in out and "FAIL ddl.json: decoded" in out
    assert out.strip().endswith("failed") and " 0 failed" not in out


def test_the_named_vectors_are_what_their_builder_writes() -> None:
    encodings = (Encoding.PROTOBUF, Encoding.AVRO, Encoding.JSON)
    for i, named in enumerate(named_streams.NAMED):
        written = json.loads((STREAMS / f"{named.name}.json").read_text("utf-8"))
        assert written == named_streams.build(named, encodings[i % 3]), named.name
