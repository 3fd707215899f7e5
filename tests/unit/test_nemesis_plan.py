"""The nemesis's fault plan (`benchmarks.nemesis.plan`): seeded, the count asked for, one
fault at a time, each bounded, every kind drawn over a long run."""

from __future__ import annotations

import itertools

from benchmarks.nemesis import KINDS, MAX_FAULT_S, plan


def test_a_seed_gives_one_plan_and_another_seed_another() -> None:
    assert plan(7, 600, 37) == plan(7, 600, 37)
    assert plan(7, 600, 37) != plan(8, 600, 37)


def test_faults_do_not_overlap_and_end_inside_the_run() -> None:
    for seed in range(20):
        faults = plan(seed, 600, 37)
        assert len(faults) == 37
        for before, after in itertools.pairwise(faults):
            assert before.at + before.duration < after.at
        assert all(0 < f.duration <= MAX_FAULT_S for f in faults)
        assert faults[0].at >= 10 and faults[-1].at + faults[-1].duration < 600


def test_a_ten_minute_run_draws_every_kind_of_fault_over_three_seeds() -> None:
    drawn = {f.kind for seed in (1, 2, 3) for f in plan(seed, 600, 37)}
    assert drawn == set(KINDS)


def test_reader_and_network_faults_name_a_source() -> None:
    for f in plan(1, 600, 37):
        named = f.kind in ("kill-reader", "stop-reader", "cut-source")
        assert (f.target in ("source1", "source2")) == named


def test_no_faults_is_a_baseline_run() -> None:
    assert plan(1, 150, 0) == []
