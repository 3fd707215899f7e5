"""Throughput mode's stage 1 reads Spark's ranges (from its offset log) and the held rows
itself: what each read task reads, and that every offset is read once with the right flag."""

from __future__ import annotations

import json
from pathlib import Path

from rowbus.spark_apply.overlap import logged_offsets
from rowbus.spark_apply.owned import read_plan
from rowbus.spark_apply.planner import PlannerState


def _offsets(folder: Path, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    (folder / "offsets").mkdir(exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    (folder / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")


def test_logged_offsets_reads_sparks_write_ahead_entry(tmp_path: Path) -> None:
    _offsets(tmp_path, 4, {"t1": {"0": 10, "1": 7}, "t2": {"0": 3}})
    assert logged_offsets(tmp_path, 4) == {("t1", 0): 10, ("t1", 1): 7, ("t2", 0): 3}
    assert logged_offsets(tmp_path, 5) is None


def test_held_rows_and_sparks_records_are_one_read_per_partition() -> None:
    previous = PlannerState(offsets={("t", 0): 100, ("t", 1): 50}, reread={("t", 0): 90})
    starts = {("t", 0): 100, ("t", 1): 50, ("t", 2): 0}
    ends = {("t", 0): 160, ("t", 1): 50, ("t", 2): 30}
    plan = read_plan(starts, ends, previous, tasks=1)
    assert not isinstance(plan, str)
    groups, again = plan
    # One task (fewer offsets than `TASK_RECORDS`): the held rows from 90 read with Spark's
    # records after them, flagged by Spark's start; partition 1 has nothing to read.
    assert groups == [[("t", 0, 90, 160, 100), ("t", 2, 0, 30, 0)]]
    assert again == [("t", 0, 90, 100)]


def test_ranges_cut_across_tasks_cover_every_offset_once() -> None:
    previous = PlannerState(offsets={("t", 0): 20_000}, reread={("t", 0): 19_000})
    plan = read_plan({("t", 0): 20_000}, {("t", 0): 40_000}, previous, tasks=3)
    assert not isinstance(plan, str)
    groups, _ = plan
    assert len(groups) == 3
    read = [o for g in groups for (_, _, lo, hi, fresh) in g for o in range(lo, hi)]
    assert sorted(read) == list(range(19_000, 40_000))
    assert {fresh for g in groups for *_, fresh in g} == {20_000}


def test_a_partition_without_a_start_goes_to_the_drivers_path() -> None:
    plan = read_plan({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, PlannerState(), tasks=2)
    assert plan == "a partition new to Spark's offsets"
