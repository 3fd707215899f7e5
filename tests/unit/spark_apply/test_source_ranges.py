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
    read = [r.value for g in groups for r in g.ranges]
    assert sorted(read) == sorted(r.value for r in ranges)
    assert all(g.ranges for g in groups)
    assert len(groups) <= (tasks or len(ranges)) or not ranges
    if tasks and len(groups) > 1:  # each task is worth its fixed cost
        assert len(groups) <= sum(r.end - r.start for r in ranges) // TASK_RECORDS
    # The same input groups the same way (a re-run batch reads in the same tasks).
    again = group_ranges([KafkaRange(*r.value) for r in ranges], tasks)
    assert [g.value for g in again] == [g.value for g in groups]


def test_ranges_are_balanced_by_records() -> None:
    sizes = [100, 60, 50, 10, 10]
    ranges = [KafkaRange("a", p, 0, n * TASK_RECORDS // 10) for p, n in enumerate(sizes)]
    groups = group_ranges(ranges, 2)
    assert sorted(sum(r.end - r.start for r in g.ranges) for g in groups) == [
        110 * TASK_RECORDS // 10,
        120 * TASK_RECORDS // 10,
    ]
    assert len(group_ranges(ranges, None)) == 5


def test_a_small_batch_is_one_task() -> None:
    ranges = [KafkaRange("a", p, 0, 100) for p in range(6)]
    assert len(group_ranges(ranges, 2)) == 1
