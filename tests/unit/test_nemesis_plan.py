"""The nemesis's fault plan (`benchmarks.nemesis.plan`): seeded, the count asked for, one
fault at a time, each bounded, every kind drawn over a long run."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.nemesis import (
    KINDS,
    MAX_FAULT_S,
    SOURCE_KINDS,
    choose_kinds,
    epochs_back,
    kinds_line,
    main,
    plan,
    refusals_lines,
    sources_on,
)


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


def test_ten_minute_runs_draw_every_kind_of_fault_over_five_seeds() -> None:
    # 37 faults a run: with the kinds added since the first seeds, three runs no longer
    # draw them all.
    drawn = {f.kind for seed in range(1, 6) for f in plan(seed, 600, 37)}
    assert drawn == set(KINDS)


def test_reader_and_network_faults_name_a_source() -> None:
    assert {"lag-source", "restart-source"} <= set(SOURCE_KINDS) < set(KINDS)
    for f in plan(1, 600, 37):
        named = f.kind in SOURCE_KINDS
        assert (f.target in ("source1", "source2")) == named


def test_no_faults_is_a_baseline_run() -> None:
    assert plan(1, 150, 0) == []


def test_the_default_kinds_are_every_kind_and_draw_the_plan_as_before() -> None:
    assert choose_kinds() == KINDS
    assert plan(1, 600, 37, kinds=choose_kinds()) == plan(1, 600, 37)


def test_without_the_broker_faults_none_is_drawn_and_the_rest_are() -> None:
    broker = {"kill-broker", "stop-broker", "restart-broker"}
    kinds = choose_kinds(without=" kill-broker,stop-broker, restart-broker")
    assert set(kinds) == set(KINDS) - broker
    drawn = {f.kind for seed in (1, 2, 3) for f in plan(seed, 600, 37, kinds=kinds)}
    assert drawn == set(kinds)


def test_kinds_names_the_only_kinds_drawn_and_without_takes_from_them() -> None:
    kinds = choose_kinds("cut-sink,kill-apply,stall-sink", "stall-sink")
    assert kinds == ("kill-apply", "cut-sink")
    assert {f.kind for f in plan(5, 600, 37, kinds=kinds)} == set(kinds)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--kinds", "kill-reader,kill-brokr"],
            "--kinds: unknown fault kind kill-brokr; the kinds:",
        ),
        (["--without", "cut-all"], "--without: unknown fault kind cut-all; the kinds:"),
        (["--kinds", "cut-sink", "--without", "cut-sink"], "no fault kind left to draw"),
    ],
)
def test_a_bad_choice_of_kinds_is_refused_in_one_line_before_anything_starts(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert line in err[-1]


def test_the_kinds_added_later_leave_the_first_seeds_plans_as_they_were() -> None:
    # The first twelve kinds, named with --kinds, draw what the first seeds drew before the
    # lag and restart kinds came: the plan of seed 1 as it was (its first faults).
    first = choose_kinds(",".join(KINDS[:12]))
    assert "lag-sink" not in first and len(first) == 12
    drawn = [(f.kind, f.target) for f in plan(1, 600, 37, kinds=first)[:3]]
    assert drawn == [("kill-apply", ""), ("stop-reader", "source2"), ("stop-reader", "source2")]


def test_the_summary_names_the_kinds_drawn_by_the_shorter_list() -> None:
    assert kinds_line(KINDS) == f"all {len(KINDS)}"
    without = choose_kinds(without="kill-broker,stop-broker,restart-broker")
    assert kinds_line(without) == f"all {len(KINDS)} but kill-broker, stop-broker, restart-broker"
    assert kinds_line(("cut-sink", "lag-sink")) == f"2 of {len(KINDS)}: cut-sink, lag-sink"


@pytest.mark.parametrize(
    "added", [("cut-zookeeper", "lag-zookeeper"), ("kill-cluster-node", "kill-coordinator")]
)
def test_zookeeper_and_cluster_faults_name_no_source_and_come_after_the_earlier_kinds(
    added: tuple[str, str],
) -> None:
    assert KINDS.index(added[0]) > KINDS.index("kill-subscriber")
    faults = plan(3, 600, 37, kinds=added)
    assert {f.kind for f in faults} == set(added)
    assert all(f.target == "" for f in faults)


def test_failover_names_a_source_and_the_worker_kill_none_both_after_the_earlier_kinds() -> None:
    assert KINDS[-2:] == ("failover-source", "kill-spark-worker")
    assert "failover-source" in SOURCE_KINDS and "kill-spark-worker" not in SOURCE_KINDS
    faults = plan(2, 600, 37, kinds=("failover-source", "kill-spark-worker"))
    assert {f.kind for f in faults} == {"failover-source", "kill-spark-worker"}
    assert {f.target for f in faults if f.kind == "failover-source"} == {"source1", "source2"}
    assert all(f.target == "" for f in faults if f.kind == "kill-spark-worker")
    # Added last: the kinds before them, named, draw the plan they drew before.
    earlier = choose_kinds(without="failover-source,kill-spark-worker")
    assert earlier == KINDS[:-2]


def test_a_server_restart_or_failover_pauses_the_load_of_every_source_on_it() -> None:
    # Seed 11: restart-source source1 paused source1's writer only; source4's, on the same
    # server, died on the shutdown ("Lost connection to MySQL server during query").
    assert sources_on("source1") == ["source1", "source4"]
    assert sources_on("source2") == ["source2", "source3"]
    assert sources_on("sink") == []


def test_a_checkpoint_of_an_older_epoch_after_a_newer_one_is_a_deposed_leader_writing() -> None:
    # Log order per source: a takeover raises the epoch; a leader that wrote after losing
    # its lease leaves its (older) epoch after the successor's.
    fine = {
        "source1": [(0, 1, "a"), (4, 1, "a"), (9, 2, "b"), (12, 2, "b")],
        "source2": [(1, 1, "c"), (2, 3, "d")],
    }
    assert epochs_back(fine) == []
    zombie = {"source1": [(0, 1, "a"), (9, 2, "b"), (11, 1, "a"), (12, 2, "b")]}
    assert epochs_back(zombie) == ["source1: checkpoint @11 of epoch 1 (a) after @9 of epoch 2 (b)"]


def test_refusals_of_one_kind_are_one_line_with_a_count() -> None:
    spill = "subscriber (pid {}): rowbus: error: spill folder /s/rowbus-spill-{}: File too large"
    refusals = [
        spill.format(1, "a"),
        "apply (pid 7): apply stopped: LogChangedError: t[0]@5: another record now",
        spill.format(2, "b"),
        spill.format(3, "c"),
    ]
    assert refusals_lines(refusals) == [
        spill.format(1, "a") + " (and 2 more like it)",
        refusals[1],
    ]
