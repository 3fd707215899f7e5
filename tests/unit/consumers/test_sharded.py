"""The pure part of sharded consumption: assignment, rebalance moves, shard keys, combined
resume points and the per-shard skip."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rowbus.consumers.sharded.assignment import (
    ShardKey,
    already_handled,
    assign,
    combine,
    rebalance,
)
from rowbus.merge.checkpoint import Checkpoint
from rowbus.merge.positions import Floor
from rowbus.protocol.events import ColumnSchema, Op, TableSchema
from rowbus.protocol.partition import encode_key, java_partition
from tests.unit.consumers.scenario import BASE_TS, row

members_st = st.sets(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=6)


@given(members=members_st, shards=st.integers(1, 32))
def test_every_shard_has_exactly_one_owner_and_owners_are_balanced(
    members: set[str], shards: int
) -> None:
    owners = assign(members, shards)
    assert set(owners) == members
    counts = [len(s) for s in owners.values()]
    assert sorted(s for held in owners.values() for s in held) == list(range(shards))
    assert max(counts) - min(counts) <= 1


@given(members=members_st, shards=st.integers(1, 32), data=st.data())
def test_assignment_depends_only_on_the_member_set(
    members: set[str], shards: int, data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(sorted(members)))
    assert assign(shuffled, shards) == assign(members, shards)


@given(before=members_st, after=members_st, shards=st.integers(1, 16))
def test_rebalance_moves_hand_every_shard_over_once(
    before: set[str], after: set[str], shards: int
) -> None:
    old = assign(before, shards)
    new = assign(after, shards)
    stops: list[int] = []
    starts: list[int] = []
    for member in before | after:
        plan = rebalance(old.get(member, frozenset()), after, member, shards)
        assert plan.keep | plan.start == new.get(member, frozenset())
        assert not plan.stop & plan.start
        stops += plan.stop
        starts += plan.start
    # a shard that changes owner is stopped by one process and started by exactly one
    assert sorted(starts) == sorted(s for m, held in new.items() for s in held - old.get(m, set()))
    assert len(starts) == len(set(starts))
    assert len(stops) == len(set(stops))


def test_a_member_that_left_stops_everything() -> None:
    plan = rebalance({0, 2}, ["b"], "a", 4)
    assert plan.stop == {0, 2} and not plan.start and not plan.keep


TABLE = TableSchema(
    "db",
    "t",
    (ColumnSchema("id", "bigint"), ColumnSchema("v", "int")),
    ("id",),
)


def test_default_shard_field_is_the_primary_key_as_the_partitioner_hashes_it() -> None:
    key = ShardKey(3)
    r = row("s1", BASE_TS, "x", 0, 1, 7)  # after = (70, 0)
    assert key.of(r, TABLE) == java_partition(encode_key("db", "t", (70,)), 3)


def test_a_configured_shard_column_replaces_the_primary_key() -> None:
    key = ShardKey(5, {"db.*": ["v"]})
    rows = [row("s1", BASE_TS, "x", i, None, 10 + i) for i in range(4)]  # v = index
    assert [key.of(r, TABLE) for r in rows] == [
        java_partition(encode_key("db", "t", (i,)), 5) for i in range(4)
    ]
    # same shard field value → same shard, whatever the primary key
    same = [row("s1", BASE_TS, "x", 2, None, off) for off in (1, 50, 99)]
    assert len({key.of(r, TABLE) for r in same}) == 1


def test_a_delete_is_sharded_by_its_before_image() -> None:
    from dataclasses import replace

    insert = row("s1", BASE_TS, "x", 0, 1, 7)
    delete = replace(insert, op=Op.DELETE, before=insert.after, after=None)
    assert ShardKey(4).of(delete, TABLE) == ShardKey(4).of(insert, TABLE)


def point(offset: int, pos: int, ts: int) -> Checkpoint:
    return Checkpoint(
        offsets={("a", 0): offset, ("a", 1): offset + 5},
        floors={"s1": Floor(position=(0, 1, "bin.000001", pos, 0))},
        watermarks={("a", 0, "s1"): (ts, offset - 1)},
        ts=ts,
    )


def test_combined_point_is_the_oldest_element_by_element() -> None:
    old, new = point(10, 100, 1000), point(20, 200, 2000)
    both = combine([new, old])
    assert both == Checkpoint(
        offsets=old.offsets, floors=old.floors, watermarks=old.watermarks, ts=old.ts
    )
    assert combine([new]) == new
    assert combine([]) is None
    # a partition or source one point does not name is read from the start
    partial = Checkpoint(offsets={("a", 0): 30}, floors={}, ts=3000)
    merged = combine([new, partial])
    assert merged is not None
    assert merged.offsets == {("a", 0): 20} and merged.floors == {}


def test_a_shard_skips_what_its_own_point_covers() -> None:
    shard_point = point(20, 200, 2000)
    assert already_handled(shard_point, row("s1", BASE_TS, "x", 0, 1, 200))
    assert not already_handled(shard_point, row("s1", BASE_TS, "y", 0, 1, 201))
    assert not already_handled(shard_point, row("s2", BASE_TS, "z", 0, 1, 5))
    assert not already_handled(None, row("s1", BASE_TS, "x", 0, 1, 1))


def test_a_keyless_table_is_sharded_by_its_name_so_its_rows_keep_their_order() -> None:
    from dataclasses import replace

    keyless = TableSchema("db", "t", TABLE.columns, ())
    key = ShardKey(7)
    rows = [row("s1", BASE_TS, "x", i, None, 10 + i) for i in range(6)]
    assert {key.of(replace(r, primary_key=()), keyless) for r in rows} == {
        java_partition(encode_key("db", "t", ()), 7)
    }


def test_an_update_that_changes_the_shard_field_is_a_delete_then_an_insert() -> None:
    from dataclasses import replace

    key = ShardKey(5, {"db.*": ["v"]})
    insert = row("s1", BASE_TS, "x", 1, None, 7)  # after = (71, 1)
    moved = None
    for v in range(2, 40):
        update = replace(insert, op=Op.UPDATE, before=insert.after, after=(71, v))
        if key.of(update, TABLE) != key.of(insert, TABLE):
            moved = update
            break
    assert moved is not None
    (old, gone), (new, came) = key.route(moved, TABLE)
    assert old == key.of(insert, TABLE)
    assert (gone.op, gone.before, gone.after) == (Op.DELETE, (71, 1), None)
    assert (came.op, came.before, came.after) == (Op.INSERT, None, moved.after)
    assert new == key.of(came, TABLE)
    same = replace(insert, op=Op.UPDATE, before=(71, 1), after=(5, 1))
    assert key.route(same, TABLE) == [(key.of(same, TABLE), same)]
