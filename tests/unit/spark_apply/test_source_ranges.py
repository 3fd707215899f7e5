"""The source's grouping of Kafka ranges into Spark tasks (`source.group_ranges`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rowbus.spark_apply.source import KafkaRange, group_ranges

spans = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]), st.integers(0, 7), st.integers(0, 50), st.integers(1, 90)
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
    # The same input groups the same way (a re-run batch reads in the same tasks).
    again = group_ranges([KafkaRange(*r.value) for r in ranges], tasks)
    assert [g.value for g in again] == [g.value for g in groups]


def test_ranges_are_balanced_by_records() -> None:
    ranges = [KafkaRange("a", p, 0, n) for p, n in enumerate([100, 60, 50, 10, 10])]
    groups = group_ranges(ranges, 2)
    assert sorted(sum(r.end - r.start for r in g.ranges) for g in groups) == [110, 120]
    assert len(group_ranges(ranges, None)) == 5
