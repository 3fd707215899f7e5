"""The source's grouping of Kafka ranges into Spark tasks (`source.group_ranges`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rowbus.spark_apply.source import TASK_RECORDS, KafkaRange, group_ranges

spans = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]), st.integers(0, 7), st.integers(0, 50), st.integers(1, 9000)
    ),
    max_size=12,
    unique_by=lambda t: (t[0], t[1]),
)


@given(spans, st.one_of(st.none(), st.integers(1, 6)))
def test_every_range_is_read_once_by_at_most_tasks_tasks(
    given_spans: list[tuple[str, int, int, int]], tasks: int | None
) -> None:
    ranges = [KafkaRange(t, p, a, a + n) for t, p, a, n in given_spans]
    groups = group_ranges(ranges, tasks)
    read = sorted(r.value for g in groups for r in g.ranges)
    offsets = [(t, p, o) for t, p, a, b in read for o in range(a, b)]
    assert len(offsets) == len(set(offsets))  # no offset twice
    assert set(offsets) == {
        (r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)
    }
    assert all(g.ranges for g in groups)
    assert all(r.end > r.start for g in groups for r in g.ranges)
    assert len(groups) <= (tasks or len(ranges)) or not ranges
    if tasks and len(groups) > 1:  # each task is worth its fixed cost
        assert len(groups) <= sum(r.end - r.start for r in ranges) // TASK_RECORDS
    # The same input groups the same way (a re-run batch reads in the same tasks).
    again = group_ranges([KafkaRange(*r.value) for r in ranges], tasks)
    assert [g.value for g in again] == [g.value for g in groups]


@given(spans, st.integers(1, 6))
def test_tasks_read_equal_offsets(given_spans: list[tuple[str, int, int, int]], tasks: int) -> None:
    """A batch waits for its slowest task: groups differ by at most one offset, but the last."""
    ranges = [KafkaRange(t, p, a, a + n) for t, p, a, n in given_spans]
    sizes = [sum(r.end - r.start for r in g.ranges) for g in group_ranges(ranges, tasks)]
    assert len(set(sizes[:-1])) <= 1
    assert not sizes or sizes[-1] <= sizes[0]


def test_three_partitions_on_two_tasks_are_cut_in_half() -> None:
    ranges = [KafkaRange("a", p, 10, 10 + 3 * TASK_RECORDS) for p in range(3)]
    groups = group_ranges(ranges, 2)
    assert [sum(r.end - r.start for r in g.ranges) for g in groups] == [9 * TASK_RECORDS // 2] * 2
    assert [r.value for r in groups[1].ranges] == [
        ("a", 1, 10 + 3 * TASK_RECORDS // 2, 10 + 3 * TASK_RECORDS),
        ("a", 2, 10, 10 + 3 * TASK_RECORDS),
    ]
    assert len(group_ranges(ranges, None)) == 3


def test_a_small_batch_is_one_task() -> None:
    ranges = [KafkaRange("a", p, 0, 100) for p in range(6)]
    assert len(group_ranges(ranges, 2)) == 1
